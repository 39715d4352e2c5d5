#!/bin/bash
# Prepared for the next session (this one's device time ran out): what v16b (0a49c71) was not
# measured on. (1) H=128 4096 and 8192 themselves (call 7's --heads 16 made them H=16), v15
# against v16b, three rounds, under the power cap (--warmup-ms 200) and in the default timing.
# Prediction: v16b = v15 within 1% on both (its consumer code is v15's source; v16 measured -1.9%
# on H=128 4096). (2) compute-sanitizer memcheck, racecheck and synccheck over the sm90 tests,
# eager and captured (scripts/gpu-check's filter). Build here: a 90a build of 81ab9c0 (v15) and of
# 0a49c71 or later; copy mlakit-bench of each (stripped) into carry8/mb-v15 and carry8/mb-v16b, and
# the later build's tests/mlakit_gpu_tests into carry8/. Run with carry ["carry8"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for wu in 200 0; do
  for r in 1 2 3; do
    for b in v15 v16b; do
      timeout 60 carry8/mb-$b --kernel sm90 --workload v3_128h_4096 --workload v3_128h_8192 --workload 1x999 \
        --workload 8x999+200 --iters 20 --warmup-ms $wu --no-check 2>&1 | grep "cuda:0/" | awk -v b=$b -v r=$r -v wu=$wu '{print "warmup-ms " wu, b, "r" r, $1, $5, $6}'
    done
  done
done > $OUT/ab_h128.txt 2>&1
cat $OUT/ab_h128.txt; el ab
T=carry8/mlakit_gpu_tests
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90*:-*SplitKeyRanges*'
for tool in memcheck racecheck synccheck; do
  timeout 170 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$F" > $OUT/$tool.log 2>&1
  echo "$tool rc=$?: $(grep 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/$tool.log | tail -1)"
  el $tool
done
