#!/bin/bash
# Session 29 call 7: the MLA GPU tests call 6's 200 s limit cut (CudaMlaGraph, one CudaMlaSteps
# case), and whether the tuning is what made call 6's MlaStep tests 2.5x slower than call 1's
# (or the host): one test with the tuning off, on and on again.
set -u
source bench/device_env.sh
T='Layouts/CudaMlaSteps.LaterStepsReadWhatEarlierStepsWrote/bs16_ws0'
for tune in 0 1 0 1; do
  MLAKIT_GEMM_TUNE=$tune timeout 60 carry1/tests30 --gtest_filter="$T" 2>&1 | grep -E "OK \]|FAILED" | sed "s/^/tune=$tune /"
done
el ab
timeout 200 carry1/tests30 --gtest_filter='*CudaMlaGraph*:*LaterSteps*bs64_ws300_upload_in_run' > $OUT/tests_rest.log 2>&1; echo "rest rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|OK \]" $OUT/tests_rest.log | head -14
el done
