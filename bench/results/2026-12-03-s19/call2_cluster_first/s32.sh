#!/bin/bash
# Device call 2 of session 19: the first run of 2-CTA clusters sharing K/V tiles by TMA
# multicast (v15 candidate, uncommitted on 8b69476; carry24/DIGEST is the source digest).
# carry24/: mlakit_gpu_tests and mlakit-bench of build-cuda (80;90a), stripped.
#  1. sm90 correctness tests with clusters (the default), under a timeout (a protocol bug hangs);
#  2. the same prefill tests with MLAKIT_SM90_CLUSTER=1 (the unclustered path);
#  3. A/B of the same binary, MLAKIT_SM90_CLUSTER=2 against 1, round 1 reference-checked.
# Run from the repository root with carry ["carry24"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry24/COMMIT)
T=carry24/mlakit_gpu_tests
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90*:Kernels/CudaGraph*/sm90:Kernels/CudaScale.*/sm90:Shapes/CudaSplitK.*/sm90*'
timeout 150 $T --gtest_filter="$F" > $OUT/gpu_c2.log 2>&1; echo "cluster 2 tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]|^\[ RUN|Failure|rror" $OUT/gpu_c2.log | tail -12
el c2
MLAKIT_SM90_CLUSTER=1 timeout 60 $T --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90*' > $OUT/gpu_c1.log 2>&1; echo "cluster 1 tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" $OUT/gpu_c1.log | tail -6
el c1
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 100x999 --workload 8x999+200 --workload 1x999"
for r in 1 2; do
  for c in 2 1; do
    chk=""; [ $r = 2 ] && chk="--no-check"
    echo "== round $r cluster $c"
    MLAKIT_SM90_CLUSTER=$c timeout 90 carry24/mlakit-bench --kernel sm90 $WL --iters 20 $chk 2>&1 | grep -E "cuda:0/|FAIL|rror"
  done
done > $OUT/ab_bench.txt 2>&1
cat $OUT/ab_bench.txt; el done
