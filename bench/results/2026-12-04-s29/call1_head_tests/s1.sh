#!/bin/bash
# Session 29 call 1 (session 28's prepared s10.sh, with the test binary rebuilt at 3a1e4d3).
# carry1/tests29h = HEAD (3a1e4d3) GPU tests; carry1/mb28h = e45e606's bench (same kernels as HEAD);
# carry1/mb28r + tests28r = HEAD with split_release.patch (the split publisher as barrier +
# st.release.gpu in thread 0 instead of a fence in every thread and a relaxed flag write).
# Predictions: every MLA / GEMM test passes, WeightViewLessAlignedThanTheTunedChoices too; the
# release patch's split tests pass bitwise, sanitizers clean, 1x32768 and 100x999 level.
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
timeout 240 carry1/tests29h --gtest_filter='*MlaGemm*:*Mla*' > $OUT/tests_h.log 2>&1; echo "HEAD mla/gemm tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|tests ran" $OUT/tests_h.log | head
el tests_h
F='*CudaPrefill.Split*sm90*:*CudaPrefill.TailSplit*sm90*:*CudaScale.BatchInvariant*sm90*'
timeout 150 carry1/tests28r --gtest_filter="$F" > $OUT/tests_r.log 2>&1; echo "release patch split tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|tests ran" $OUT/tests_r.log | head
el tests_r
S='*CudaPrefill.SplitKeyRangesMatchUnsplitPlans/*sm90_d192x128_bf16:*CudaPrefill.TailSplit*/*sm90_d192x128_bf16'
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 carry1/tests28r --gtest_filter="$S" > $OUT/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E '^\[  PASSED|ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log | tr '\n' ' ')"
done
el sanitizers
ab_rounds $OUT/ab.txt 3 carry1/mb28h carry1/mb28r -- --kernel sm90 --workload 1x32768 --workload 100x999 --iters 20 --warmup-ms 0 --no-check > $OUT/ab_summary.txt
cat $OUT/ab_summary.txt
el ab
