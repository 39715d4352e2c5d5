#!/bin/bash
# Device call 6 of session 19: the softmax's row sums on the tensor core (MLAKIT_SM90_ROWSUM_MMA:
# a m64n8k16 wgmma of each P fragment by a block of ones beside every P V k-step; the softmax
# drops its 64 FADDs per thread and tile). Uncommitted on carry27/COMMIT (digest carry27/DIGEST).
# carry27/: mlakit_gpu_tests + mlakit-bench (build-cuda, 80;90a), base/mlakit-bench = v14.
#  1. sm90 prefill, scale, graph, split-K and MLA step GPU tests; 2. A/B base / rowsum, two
#  rounds, round 1 reference-checked; 3. memcheck over the sm90 d192 prefill and graph tests.
# Run from the repository root with carry ["carry27"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry27/COMMIT)
T=carry27/mlakit_gpu_tests
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90*:Kernels/CudaScale.*/sm90:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90*:Shapes/CudaMlaStep.*/sm90_*'
timeout 150 $T --gtest_filter="$F" > $OUT/gpu_rowsum.log 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $OUT/gpu_rowsum.log | tail -8
el tests
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 100x999 --workload 8x999+200 --workload 1x999"
for r in 1 2; do
  for v in base rowsum; do
    chk=""; [ $r = 2 ] && chk="--no-check"
    B=carry27/mlakit-bench; [ $v = base ] && B=carry27/base/mlakit-bench
    echo "== round $r $v"
    timeout 90 $B --kernel sm90 $WL --iters 20 $chk 2>&1 | grep -E "cuda:0/|FAIL|rror"
  done
done > $OUT/ab_bench.txt 2>&1
cat $OUT/ab_bench.txt; el bench
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?: $(grep 'ERROR SUMMARY' $OUT/memcheck.log | tail -1) $(grep -E '^\[  (PASSED|FAILED) ' $OUT/memcheck.log | tr '\n' ' ')"
el done
