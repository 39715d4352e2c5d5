#!/bin/bash
# Session 25 call 4: the record at HEAD (the kernel is b3a6090's; this is one more pass of #6's
# method on a fresh machine) and plan()'s host cost from C++ (the tail rule's list-scheduling
# check is new planning work since session 19 measured 15.5 us at batch 100).
set -u
source bench/device_env.sh binding
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
for r in 1 2 3; do carry1/mb --plan-only --device cuda 2>&1 | grep -E "^ +(1|8|100) |target"; done | tee $OUT/plan_only.txt
el plan
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout 300 scripts/gpu-check $OUT/record > /tmp/gc.txt 2>&1; echo "gpu-check rc=$?"
rm -f $OUT/record/tests.log $OUT/record/build.log
grep -E '^\s+compare ' $OUT/record/summary.txt
sed -n '/^| workload | mlakit ms/,/^$/p' $OUT/record/summary.txt
el done
