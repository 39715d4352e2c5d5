#!/bin/bash
# Session 28 call 9: the split merge with one published part per slot (the half that arrives
# first publishes, the second waits for its flag and merges from registers; slot 136 -> 68 KiB).
# carry1/mb28 = the kernel before (v19), carry1/mb28s / tests28s = the change. Prediction: results
# bitwise as before (the merge's operands and roundings unchanged), timing level (only split
# items' epilogues change; 1x32768's tail halves save one 34 KB write per warpgroup).
set -u
source bench/device_env.sh
F='*CudaPrefill.Split*sm90*:*CudaPrefill.TailSplit*sm90*:*CudaScale.BatchInvariant*sm90*:*CudaPrefill.RaggedLengths*sm90*:*CudaPrefill.BitwiseStable*sm90*:*CudaGraph*sm90'
timeout 150 carry1/tests28s --gtest_filter="$F" > $OUT/tests.log 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|tests ran|^\[  FAILED" $OUT/tests.log | head
el tests
S='*CudaPrefill.SplitKeyRangesMatchUnsplitPlans/*sm90_d192x128_bf16:*CudaPrefill.TailSplit*/*sm90_d192x128_bf16'
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 carry1/tests28s --gtest_filter="$S" > $OUT/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E '^\[  PASSED|ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log | tr '\n' ' ')"
done
el sanitizers
ab_rounds $OUT/ab.txt 3 carry1/mb28 carry1/mb28s > $OUT/ab_summary.txt; cat $OUT/ab_summary.txt
el done
