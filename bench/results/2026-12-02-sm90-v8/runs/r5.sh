#!/bin/bash
set -u
export MLAKIT_GIT_COMMIT=1cbfeb8
cmake -S . -B build-py -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/py_build.log 2>&1 && cmake --build build-py -j16 >> /tmp/py_build.log 2>&1; echo "py build rc=$?"; tail -2 /tmp/py_build.log
mkdir -p build-py/tests && cp carry3/bld/tests/mlakit_gpu_tests build-py/tests/ && cp carry3/bld/mlakit-bench build-py/
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=pytest,plan,flashinfer,compare,compare-mla COMPARE_MLA_ARGS="--reps 3" timeout 560 scripts/gpu-check "$OUT" 2>&1 | grep -vE "^\s*$" | tail -120
