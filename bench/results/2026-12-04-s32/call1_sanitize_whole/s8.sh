#!/bin/bash
# Prepared in session 31, not run (device time): gpu-check's whole sanitize step with the merge
# kernel's tests in a second process per tool (SANITIZE_SOLO_FILTER, default 'Types/CudaMerge.*'),
# which only a narrowed filter has run (call7_solo_filter/). carry ["carry1"] (binaries of any
# commit since 30b65f4; the kernels are unchanged). ~4-6 minutes.
# Prediction: memcheck 30 tests, racecheck 22, synccheck 30, all clean; no hang in the tuned
# GEMM's test (its process no longer runs the merge's tests before it).
set -u
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry1 GPU_CHECK_STEPS=sanitize timeout 540 scripts/gpu-check $OUT/san \
  > $OUT/gpu_check_stdout.txt 2>&1
echo "gpu-check sanitize rc=$?"; grep -E "sanitize" $OUT/san/summary.txt
gzip -f $OUT/san/tests.log && mv $OUT/san/tests.log.gz $OUT/sanitize_tests.log.gz
cp $OUT/san/summary.txt $OUT/sanitize_summary.txt; rm -rf $OUT/san
