#!/bin/bash
# Prepared for the next session's first device call (not run: this session's device time ran
# out): every GPU test of the v15 build in one uninterrupted run (session 20 covered them across
# two calls), then memcheck, racecheck and synccheck, through scripts/gpu-check's own gpu-tests
# and sanitize steps (its filter, and its racecheck pass that leaves out the MLA step tests whose
# cuBLAS GEMMs racecheck cannot model) on the carried test binary.
# Build here: make -C build-cuda -j2 mlakit_gpu_tests; copy build-cuda/tests/mlakit_gpu_tests into
# carryN/ (stripped), the commit into carryN/COMMIT. Run from the repository root with carry ["carryN"].
set -u
C=${CARRY:-carry31}
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat $C/COMMIT)
mkdir -p /tmp/g
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=$C GPU_CHECK_STEPS=gpu-tests,sanitize \
  timeout 560 scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
echo "gpu-check rc=$?"; el done
sed -n '/gpu-check summary/,$p' /tmp/g/summary.txt | head -20
tar czf $OUT/g.tgz -C /tmp g
