#!/bin/bash
# Device call 2 of session 20: half tiles (MLAKIT_SM90_HALF_TILES=1): a consumer warpgroup whose
# valid rows see none of the upper 64 keys of an item's last kv tile (the causal diagonal for the
# q tile's first 64 rows; a sequence ending in the tile's first half) computes S, softmax, P and
# P V over the first 64 keys only. Uncommitted on carry29/COMMIT (digest carry29/DIGEST).
# carry29/: mlakit_gpu_tests + mlakit-bench (build-cuda, 80;90a); base/mlakit-bench = v14.
#  1. every GPU test (sm80 shares the online softmax's changed signature); 2. A/B v14 / half,
#  two rounds, round 1 reference-checked; 3. memcheck over the sm90 d192 prefill, split-K and graph tests.
# Run from the repository root with carry ["carry29"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry29/COMMIT)
T=carry29/mlakit_gpu_tests
timeout 300 $T > $OUT/gpu_all.log 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $OUT/gpu_all.log | tail -12
el tests
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 100x999 --workload 8x999+200 --workload 1x999 --workload ctx_799_vs_200"
for r in 1 2; do
  for v in base half; do
    chk=""; [ $r = 2 ] && chk="--no-check"
    B=carry29/mlakit-bench; [ $v = base ] && B=carry29/base/mlakit-bench
    echo "== round $r $v"
    timeout 100 $B --kernel sm90 $WL --iters 20 $chk 2>&1 | grep -E "cuda:0/|FAIL|rror"
  done
done > $OUT/ab_bench.txt 2>&1
cat $OUT/ab_bench.txt; el bench
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90*' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?: $(grep 'ERROR SUMMARY' $OUT/memcheck.log | tail -1) $(grep -E '^\[  (PASSED|FAILED) ' $OUT/memcheck.log | tr '\n' ' ')"
el done
