#!/bin/bash
# Session 30 call 6: the build with -DMLAKIT_PDL=ON (30b65f4's tree, built here: -DMLAKIT_CUDA_ARCHS=90a
# -DMLAKIT_BUILD_PYTHON=OFF -DMLAKIT_PDL=ON), before making it the default: every GPU test (4 shards)
# and the sanitizers through scripts/gpu-check; the graph tests with PDL switched off at run time;
# the kernel table's workloads with PDL on and off (same binary, MLAKIT_DISABLE_PDL=1), 2 rounds.
set -u
source bench/device_env.sh
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry1 GPU_CHECK_STEPS=gpu-tests,sanitize GPU_TEST_SHARDS=4 \
  timeout 330 scripts/gpu-check $OUT > $OUT/gpu_check_stdout.txt 2>&1; echo "gpu-check rc=$?"
el "gpu-check"
sed -n '/gpu tests:/,$p' $OUT/summary.txt
grep -E "^\[  FAILED  \] [A-Z]" $OUT/tests.log | sort -u | head
MLAKIT_DISABLE_PDL=1 timeout 60 carry1/mlakit_gpu_tests --gtest_filter='*CudaMlaGraph*:Kernels/CudaGraph*' > /tmp/graph_nopdl.txt 2>&1
echo "graph tests, PDL off at run time: rc=$? $(grep -E '^\[  PASSED|^\[  FAILED' /tmp/graph_nopdl.txt | tr '\n' ' ')"
el "graph tests nopdl"
ab_rounds $OUT/ab.txt 2 carry1/mlakit-bench carry1/mlakit-bench-nopdl | tee $OUT/ab_summary.txt
el "ab"
