#!/bin/bash
# Device call 5 of session 16: at the head (cuBLAS without a workspace by default), the MLA, graph
# and StreamGraph GPU tests (the kernels are unchanged), and compute-sanitizer memcheck over the
# MLA graph / StreamGraph tests (the device budget left allows ~2 minutes).
# carry ["carry13"] (build-cuda's mlakit_gpu_tests of the commit in COMMIT).
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
mkdir -p /tmp/g; T=carry13/mlakit_gpu_tests
timeout 120 $T --gtest_filter='*Mla*:*Graph*:-*sm80*' > /tmp/g/gpu_tests.log 2>&1 & A=$!
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='Upload/CudaMlaGraph.*/upload_in_plan:CudaStreamGraph.*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" > /tmp/g/memcheck_mla.log &
S=$!
wait $A; echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" /tmp/g/gpu_tests.log | head
wait $S; cat /tmp/g/memcheck_mla.log; el done
tar czf $OUT/g.tgz -C /tmp g
