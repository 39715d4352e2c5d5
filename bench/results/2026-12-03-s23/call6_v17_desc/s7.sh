#!/bin/bash
# Device call 7 of session 23: v17 (v16b with each wgmma descriptor advanced from a base built
# once per product instead of rebuilt per k-step; v17.patch on 1809117) against v16b.
# Call 5's ncu: at locked clocks mlakit's 1x32768 took 5.1% more cycles than fa3's and 12% more
# warp instructions, the excess outside the FMA/ALU/XU pipes; the SASS shows ~130 uniform
# instructions per warp and kv tile building descriptors (44 of them gone in v17; consumer 7388 ->
# 7209 instructions, no spills). Prediction: if the softmax phase is issue-bound (session 17),
# v17 gains 1-4% on every workload, most on the long ones.
#  1. the sm90 GPU tests with v17; 2. mlakit-bench A/B, two rounds, alternating.
# Carry ["carry2"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
T=carry2/mlakit_gpu_tests
timeout 120 $T --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_*:Kernels/CudaScale.*/sm90*:Shapes/CudaSplitK.*/sm90*:Kernels/CudaGraph*/sm90:*Invarian*' > $OUT/gpu_v17.log 2>&1
echo "v17 sm90 tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $OUT/gpu_v17.log | head; el tests
for r in 1 2; do for b in v16b v17; do
  timeout 80 carry2/mb-$b --kernel sm90 --workload 1x16384 --workload 1x32768 --workload ctx_8x1024_vs_4096 \
    --workload v3_128h_8192 --workload 100x999 --workload 8x999+200 --workload 1x999 --iters 20 $( [[ $r == 1 ]] || echo --no-check ) 2>&1 \
    | grep "cuda:0/" | awk -v b=$b -v r=$r '{print b, "r" r, $0}'
done; done > $OUT/ab_v17.txt 2>&1
cat $OUT/ab_v17.txt | awk '{print $1, $2, $3, $7, $8, $NF}'; el ab
