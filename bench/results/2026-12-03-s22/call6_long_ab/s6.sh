#!/bin/bash
# Device call 6 of session 22: does v16 (eager launches on the kernel parameter's tensor maps)
# change the long launches? Call 5's A/B covered only the short ones, and its compare.py run read
# 1x16384 at 712 TFLOP/s against session 20's 737 (fa3 752 against 721). mlakit-bench v15
# (carry4/mlakit-bench-base) against v16, ABAB, --warmup-ms 200 (every sample under the power cap);
# then compare.py mlakit beside fa3 on 1x16384 and 1x32768, twice. Prediction: v16 = v15 within
# 1% on the long work (one map fetch source per TMA instruction, same pipeline); 1x16384 beside
# fa3 within the ±4% both show between runs. Run with carry ["carry4", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
(timeout 150 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j12 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt) &
B=$!
for r in 1 2; do
  for b in mlakit-bench-base mlakit-bench; do
    timeout 60 carry4/$b --kernel sm90 --workload 1x16384 --workload ctx_8x1024_vs_4096 --workload v3_128h_4096 \
      --workload 1x32768 --iters 20 --warmup-ms 200 --no-check 2>&1 | grep "cuda:0/" | awk -v b=$b -v r=$r '{print b, "r" r, $1, $7, $8}'
  done
done > $OUT/ab_long.txt 2>&1
cat $OUT/ab_long.txt; el ab
wait $B; el pybuild
FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi.txt 2>&1 || tail -5 /tmp/fi.txt
export PYTHONPATH="$PWD/build-py/python:$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
for pass in 1 2; do
  timeout 100 python3 bench/compare.py --workload 1x16384 --workload 1x32768 --methods mlakit,flashinfer_fa3 \
    --overhead none --no-ceilings --plan-iters 3 --json $OUT/compare_pass$pass.json 2>&1 | grep -E "^(1x16384|1x32768) " | sed "s/^/pass $pass: /"
done
el compare
