#!/bin/bash
# Device call 4 of session 18, at the commit in carry21/COMMIT (v14: head groups sized by the
# grid and the longest sequence, plan/run_order.h):
#  1. the sm90 + MLA + graph GPU tests (carry21/mlakit_gpu_tests, build-cuda's, stripped) while
#     the Python binding builds on the device;
#  2. A/B against v13's plan (carry21/base/mlakit-bench, 8620311: head groups of up to 16), two
#     rounds interleaved, round 1 of the new build reference-checked;
#  3. compare.py beside FlashInfer fa3 / fa2, FA2 and cuDNN (the README's kernel table).
# Run from the repository root with carry ["carry21", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( 480 - ($(date +%s) - t0) )); }
export MLAKIT_GIT_COMMIT=$(cat carry21/COMMIT)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
mkdir -p /tmp/g2 /tmp/t; T=carry21/mlakit_gpu_tests
timeout 170 $T --gtest_filter='*sm90*:*Mla*:*Graph*:*Invarian*:*Large*:-*sm80*' > /tmp/t/gpu_v14.log 2>&1 & A=$!
timeout 170 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j14 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
wait $A; echo "v14 gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" /tmp/t/gpu_v14.log | head
el tests; tar czf $OUT/tests.tgz -C /tmp t
WL="--workload v3_128h_8192 --workload v3_128h_4096 --workload 1x16384 --workload 100x999 --workload 8x999+200 --workload 1x999"
{ for r in 1 2; do for b in base new; do
  echo "== bench $b round $r"
  ck=--no-check; [[ $r == 1 && $b == new ]] && ck=""
  timeout 60 carry21/$b/mlakit-bench --kernel sm90 $WL --iters 20 $ck 2>&1 | grep -E "cuda:0/|FAIL|rror"
done; done; } > $OUT/ab_bench.txt 2>&1
el ab; cat $OUT/ab_bench.txt
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout $(( $(left) - 10 )) scripts/gpu-check /tmp/g2 > /tmp/g2/console.txt 2>&1
el compare; sed -n '/compare 1x999/,$p' /tmp/g2/summary.txt | head -30
tar czf $OUT/g2.tgz -C /tmp g2; el done
