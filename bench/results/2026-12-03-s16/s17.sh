#!/bin/bash
# Device call 5 of session 16: at the head (cuBLAS without a workspace by default), every GPU test
# but the sm80 ones, and compute-sanitizer memcheck over the MLA graph / StreamGraph tests.
# carry ["carry13"] (build-cuda's mlakit_gpu_tests of the commit in COMMIT).
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
mkdir -p /tmp/g; T=carry13/mlakit_gpu_tests
timeout 200 $T --gtest_filter='-*sm80*' > /tmp/g/gpu_tests.log 2>&1 & A=$!
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='Upload/CudaMlaGraph.*:CudaStreamGraph.*:Shapes/CudaMlaStep.*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" > /tmp/g/memcheck_mla.log &
S=$!
wait $A; echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" /tmp/g/gpu_tests.log | head
wait $S; cat /tmp/g/memcheck_mla.log; el done
tar czf $OUT/g.tgz -C /tmp g
