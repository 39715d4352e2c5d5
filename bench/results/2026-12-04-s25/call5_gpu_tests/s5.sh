#!/bin/bash
# Session 25 call 5: every GPU test at HEAD (the tests of 258727e; the code since is docs only),
# then memcheck and racecheck over the tail-split batch-invariance test.
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 360 carry1/tests > $OUT/gpu_all.log 2>&1; echo "all GPU tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]|tests ran" $OUT/gpu_all.log | head -12
el tests
for tool in memcheck racecheck; do
  timeout 50 compute-sanitizer --tool $tool --error-exitcode 9 carry1/tests \
    --gtest_filter='*BatchInvariantBitwiseTailSplit/sm90' > /tmp/san.log 2>&1
  echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san.log) $(grep -c '^\[       OK' /tmp/san.log) ok"
done | tee $OUT/sanitizers.txt
el done
