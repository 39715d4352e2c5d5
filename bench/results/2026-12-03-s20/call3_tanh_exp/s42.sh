#!/bin/bash
# Device call 3 of session 20: the soft cap's tanh as 1 - 2 / (1 + 2^(2 y log2 e)) (one ex2, one
# rcp) instead of tanhf, in both kernels (cuda/common/score_transform.cuh): the sm90 consumer
# shrinks from 10.2k to 7.4k SASS instructions. Uncommitted on carry30/COMMIT (digest carry30/DIGEST).
# carry30/: mlakit_gpu_tests + mlakit-bench (build-cuda, 80;90a); base/mlakit-bench = v14;
# nocap/mlakit-bench = -DMLAKIT_SM90_EXP_NO_CAP=1 (soft-cap variants compiled out: 4.3k).
#  1. prefill, scale and split-K GPU tests of both kernels (soft cap 5 with a window, soft cap 30
#     on a causal 999-token sequence split and unsplit);
#  2. A/B v14 / tanh-exp / no-cap, two rounds, round 1 reference-checked;
#  3. with --soft-cap 30: v14 / tanh-exp on 1x16384 and 100x999, reference-checked.
# Run from the repository root with carry ["carry30"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry30/COMMIT)
T=carry30/mlakit_gpu_tests
timeout 240 $T --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.*:Kernels/CudaScale.*:Shapes/CudaSplitK.*' > $OUT/gpu_tests.log 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $OUT/gpu_tests.log | tail -12
grep -E "SoftCap.*OK|cap=30" $OUT/gpu_tests.log | head -4
el tests
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 100x999 --workload 8x999+200 --workload 1x999 --workload ctx_799_vs_200"
for r in 1 2; do
  for v in base new nocap; do
    chk=""; [ $r = 2 ] && chk="--no-check"
    B=carry30/mlakit-bench; [ $v != new ] && B=carry30/$v/mlakit-bench
    echo "== round $r $v"
    timeout 100 $B --kernel sm90 $WL --iters 20 $chk 2>&1 | grep -E "cuda:0/|FAIL|rror"
  done
done > $OUT/ab_bench.txt 2>&1
for v in base new; do
  B=carry30/mlakit-bench; [ $v != new ] && B=carry30/$v/mlakit-bench
  echo "== soft cap 30: $v"
  timeout 60 $B --kernel sm90 --workload 1x16384 --workload 100x999 --soft-cap 30 --iters 20 2>&1 | grep -E "cuda:0/|FAIL|rror"
done >> $OUT/ab_bench.txt 2>&1
cat $OUT/ab_bench.txt; el bench
