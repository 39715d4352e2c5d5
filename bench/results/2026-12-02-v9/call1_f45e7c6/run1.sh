#!/usr/bin/env bash
# Device call 1: full GPU tests (carried binary), then the Python binding built here + pytest, plan, FlashInfer, compare, compare-mla.
set -u
export MLAKIT_GIT_COMMIT=$(cat carry3/COMMIT)
mkdir -p $OUT/a $OUT/b
t0=$(date +%s)
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry3/bld GPU_CHECK_STEPS=gpu-tests scripts/gpu-check $OUT/a > $OUT/a/console.txt 2>&1
echo "gpu-tests done $(( $(date +%s) - t0 )) s"; tail -5 $OUT/a/console.txt
cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > $OUT/b/build.txt 2>&1 && cmake --build build-py -j16 >> $OUT/b/build.txt 2>&1 || { echo BUILD FAILED; tail -30 $OUT/b/build.txt; }
cp carry3/bld/mlakit-bench build-py/
echo "py build done $(( $(date +%s) - t0 )) s"
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=pytest,plan,flashinfer,compare,compare-mla COMPARE_MLA_ARGS="--reps 2" scripts/gpu-check $OUT/b > $OUT/b/console.txt 2>&1
echo "all done $(( $(date +%s) - t0 )) s"; tail -25 $OUT/b/console.txt
