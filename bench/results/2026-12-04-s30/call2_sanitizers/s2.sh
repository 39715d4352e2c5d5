#!/bin/bash
# Session 30 call 2: scripts/gpu-check's sanitize step at HEAD (compute-sanitizer memcheck,
# racecheck and synccheck over the sm90 kernel's tests, the MLA gather, tuned GEMM, step and
# graph tests) on the carried binaries.
set -u
source bench/device_env.sh
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry1 GPU_CHECK_STEPS=sanitize \
  timeout 560 scripts/gpu-check $OUT > $OUT/gpu_check_stdout.txt 2>&1; echo "gpu-check rc=$?"
el "gpu-check done"
cat $OUT/summary.txt
