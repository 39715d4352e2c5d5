#!/bin/bash
# Prepared in session 28, not run (no device time left). Builds: carry1/mb28h + tests28h = HEAD
# (e45e606: the review's GEMM fixes, never run on a GPU), carry1/mb28r + tests28r = HEAD with
# split_release.patch (the split publisher as barrier + st.release.gpu in thread 0, instead of a
# fence in every thread and a relaxed flag write; compile-checked: no spills, 7350 consumer
# instructions). Rebuild both if carry1 is gone:
#   cmake -S . -B build-v/h -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_PYTHON=OFF
#   ninja -C build-v/h mlakit-bench mlakit_gpu_tests   (then git apply the patch into build-v/r)
# Predictions: every GEMM test passes, the new WeightViewLessAlignedThanTheTunedChoices too (the
# first attempt with the 256-byte-assumed algorithm either runs or is rejected and the fallback
# runs); the release patch's split tests pass bitwise, sanitizers clean, timing level.
set -u
source bench/device_env.sh
timeout 200 carry1/tests28h --gtest_filter='*MlaGemm*:*Mla*' > $OUT/tests_h.log 2>&1; echo "HEAD mla/gemm tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $OUT/tests_h.log | head
F='*CudaPrefill.Split*sm90*:*CudaPrefill.TailSplit*sm90*:*CudaScale.BatchInvariant*sm90*'
timeout 150 carry1/tests28r --gtest_filter="$F" > $OUT/tests_r.log 2>&1; echo "release patch split tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $OUT/tests_r.log | head
S='*CudaPrefill.SplitKeyRangesMatchUnsplitPlans/*sm90_d192x128_bf16:*CudaPrefill.TailSplit*/*sm90_d192x128_bf16'
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 carry1/tests28r --gtest_filter="$S" > $OUT/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E '^\[  PASSED|ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log | tr '\n' ' ')"
done
ab_rounds $OUT/ab.txt 3 carry1/mb28h carry1/mb28r -- --kernel sm90 --workload 1x32768 --iters 20 --warmup-ms 0 --no-check > $OUT/ab_summary.txt
cat $OUT/ab_summary.txt
