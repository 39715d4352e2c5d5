#!/bin/bash
# Session 30 call 3: why call 2's racecheck pass died (the tuned GEMM's test alone under racecheck),
# then scripts/gpu-check's racecheck pass with the GEMM-running tests left out (the fixed filter),
# the Python suite on the CUDA binding (built here by device_env.sh) and FlashInfer's smoke test.
set -u
rm -rf build-py
source bench/device_env.sh binding
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 --print-limit 20 carry1/mlakit_gpu_tests \
  --gtest_filter='DTypes/CudaMlaGemm.TunedGemmMatchesFirstChoiceAndReference/bf16' > $OUT/racecheck_gemm.txt 2>&1
echo "racecheck on the tuned GEMM's test: rc=$?"; tail -15 $OUT/racecheck_gemm.txt
el "racecheck gemm"
cp carry1/mlakit_gpu_tests carry1/mlakit_cpu_tests carry1/mlakit-bench build-py/
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=sanitize,pytest,flashinfer SANITIZE_TOOLS=racecheck \
  timeout 420 scripts/gpu-check $OUT > $OUT/gpu_check_stdout.txt 2>&1; echo "gpu-check rc=$?"
el "gpu-check done"
cat $OUT/summary.txt
grep -E "passed|failed|FAILED" $OUT/tests.log | tail -5
