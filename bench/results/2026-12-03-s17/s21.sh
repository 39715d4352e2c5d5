#!/bin/bash
# Device call 4 of session 17: v13's sm90 GPU tests alone (call3 ran them beside the Python build
# and ran out of time after 69 of 85, all passed). carry ["carry16"].
set -u
t0=$(date +%s)
mkdir -p /tmp/t
timeout 230 carry16/mlakit_gpu_tests --gtest_filter='*sm90*:-*sm80*:*Mla*' > /tmp/t/gpu_v13_sm90.log 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" /tmp/t/gpu_v13_sm90.log | head
echo "[$(( $(date +%s) - t0 )) s] done"; cp /tmp/t/gpu_v13_sm90.log $OUT/
