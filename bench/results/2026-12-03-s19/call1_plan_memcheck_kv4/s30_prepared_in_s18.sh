#!/bin/bash
# Prepared in session 18, not run (no device time was left), at the commit in carry22/COMMIT (v14): plan() host cost from C++
# (the head-group rule added one pass over the lengths; target < 20 us at batch 100) and
# compute-sanitizer memcheck over the sm90 prefill and graph tests with v14's plans.
# Run from the repository root with carry ["carry22"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry22/COMMIT)
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 carry22/mlakit_gpu_tests \
  --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Kernels/CudaScale.BatchInvariantBitwise/sm90:-*SplitKeyRanges*' > $OUT/memcheck_v14.log 2>&1 & S=$!
timeout 40 carry22/new/mlakit-bench --plan-only 2>&1 | tee $OUT/plan_only.txt | tail -12
el plan
wait $S; echo "memcheck rc=$?: $(grep 'ERROR SUMMARY' $OUT/memcheck_v14.log | tail -1)"; grep -E "^\[  (PASSED|FAILED) " $OUT/memcheck_v14.log
el done
