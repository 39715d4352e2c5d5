#!/bin/bash
# Device call 5 of session 18, at the commit in carry22/COMMIT (v14, the plan's head groups):
#  1. the sm90 GPU tests call 4 ran out of time for (batch invariance, 1000 sequences, 64-bit
#     offsets, split K);
#  2. the A/B against v13's plan that call 4 lost (its base binary was not carried): carry22/base
#     = 8620311 (head groups of up to 16), carry22/new = v14; two rounds interleaved.
# Run from the repository root with carry ["carry22"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry22/COMMIT)
mkdir -p /tmp/t
timeout 240 carry22/mlakit_gpu_tests --gtest_filter='Kernels/CudaScale.*/sm90:Shapes/CudaSplitK.*/sm90*' > /tmp/t/gpu_v14_rest.log 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]|OK \]" /tmp/t/gpu_v14_rest.log | head -20
el tests; cp /tmp/t/gpu_v14_rest.log $OUT/
WL="--workload v3_128h_8192 --workload v3_128h_4096 --workload 1x16384 --workload 100x999 --workload 8x999+200 --workload 1x999"
{ for r in 1 2; do for b in base new; do
  echo "== bench $b round $r"
  timeout 60 carry22/$b/mlakit-bench --kernel sm90 $WL --iters 20 --no-check 2>&1 | grep -E "cuda:0/|FAIL|rror"
done; done; } > $OUT/ab_bench.txt 2>&1
el ab; cat $OUT/ab_bench.txt
