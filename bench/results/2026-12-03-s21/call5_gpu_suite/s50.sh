#!/bin/bash
# Device call 5 of session 21: every GPU test of v15 (carry5/COMMIT) in one uninterrupted run,
# through scripts/gpu-check's gpu-tests step on the carried test binary (session 20 covered them
# across two calls; call 3 of this session ran racecheck and synccheck).
# carry5/mlakit_gpu_tests: 90a build of v15. Run from the repository root with carry ["carry5"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry5/COMMIT)
mkdir -p /tmp/g
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry5 GPU_CHECK_STEPS=gpu-tests \
  timeout 480 scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
echo "gpu-check rc=$?"; el done
cat /tmp/g/summary.txt | head -30
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]|^\[  SKIPPED \] [A-Z]" /tmp/g/tests.log | head -20
cp /tmp/g/summary.txt /tmp/g/console.txt $OUT/; gzip -c /tmp/g/tests.log > $OUT/tests.log.gz
