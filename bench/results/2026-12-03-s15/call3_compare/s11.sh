#!/bin/bash
# Session 15, device call 3, at the commit in carry10/COMMIT (kernel v12, default flags):
#  1. ncu --set full of one 100x999 launch (the #6 target furthest from the peers' level), while
#     the Python binding builds;
#  2. compare.py beside the peers (the README's kernel table).
# Run from the repository root with carry ["carry10", ".peers"].
set -u
export MLAKIT_GIT_COMMIT=$(cat carry10/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( 590 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
B=carry10/mlakit-bench
mkdir -p /tmp/g2
timeout 300 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j12 >> /tmp/pyb.txt 2>&1" & PB=$!
timeout 150 ncu --clock-control none --set full --import-source yes -k regex:prefill_sm90 --launch-skip 3 --launch-count 1 \
  -o /tmp/n100 $B --kernel sm90 --workload 100x999 --iters 2 --warmup 3 --no-check --rotate 1 > /tmp/n100.log 2>&1
echo "ncu rc=$?"; tail -2 /tmp/n100.log
ncu -i /tmp/n100.ncu-rep --page details > $OUT/v12_100x999_details.txt 2>&1
ncu -i /tmp/n100.ncu-rep --page source --print-source sass --csv > /tmp/n100_src.csv 2>&1
python3 bench/ncu_stalls.py /tmp/n100_src.csv 60 > $OUT/v12_100x999_stalls.txt 2>&1
head -20 $OUT/v12_100x999_stalls.txt
grep -E "Duration|SM Frequency|Executed Ipc A|Issue Slots Busy|No Eligible|Registers Per|Local Memory|Achieved Occupancy|Tensor|Compute \(SM\) Throughput|Memory Throughput" $OUT/v12_100x999_details.txt | head -30; el ncu
wait $PB; tail -2 /tmp/pyb.txt; el pybuild
cp $B build-py/
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout $(( $(left) - 8 )) scripts/gpu-check /tmp/g2 > /tmp/g2/console.txt 2>&1
el compare; sed -n '/compare 1x999/,$p' /tmp/g2/summary.txt | head -30
tar czf $OUT/g2.tgz -C /tmp g2; el done
