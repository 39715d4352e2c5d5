#!/bin/bash
# Session 30 call 1: every GPU test at HEAD (46d8680 + gpu-check's GPU_TEST_SHARDS) in 4 parallel
# gtest shards, the CPU tests and plan()'s host cost, through scripts/gpu-check on the carried
# binaries (built here: -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_PYTHON=OFF).
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry1 GPU_CHECK_STEPS=gpu-tests,cpu-tests,plan GPU_TEST_SHARDS=4 \
  timeout 540 scripts/gpu-check $OUT > $OUT/gpu_check_stdout.txt 2>&1; echo "gpu-check rc=$?"
el "gpu-check done"
cat $OUT/summary.txt
grep -E "^\[  FAILED  \] [A-Z]" $OUT/tests.log | sort -u | head -20
