#!/bin/bash
# Session 26, call 7: a second pass of the record (compare.py beside the peers) at 1dc1383, whose
# sm90 SASS is 14e205b's (v19), on whatever host this call gets; the last ~250 s of device time.
set -u
source bench/device_env.sh binding
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout 170 scripts/gpu-check $OUT/record > /tmp/gc.txt 2>&1; echo "gpu-check rc=$?"
rm -f $OUT/record/tests.log $OUT/record/build.log
grep -E '^\s+compare ' $OUT/record/summary.txt
sed -n '/^| workload | mlakit ms/,/^$/p' $OUT/record/summary.txt
el done
