#!/bin/bash
# Session 26, call 4: the record at 14e205b (v19) beside the peers, and plan()'s host cost.
set -u
source bench/device_env.sh binding
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
for r in 1 2 3; do carry1/mb --plan-only --device cuda 2>&1 | grep -E "^ +(1|8|100) |target"; done | tee $OUT/plan_only.txt
el plan
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout 330 scripts/gpu-check $OUT/record > /tmp/gc.txt 2>&1; echo "gpu-check rc=$?"
rm -f $OUT/record/tests.log $OUT/record/build.log
grep -E '^\s+compare ' $OUT/record/summary.txt
sed -n '/^| workload | mlakit ms/,/^$/p' $OUT/record/summary.txt
el done
