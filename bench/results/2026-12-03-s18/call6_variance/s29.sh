#!/bin/bash
# Device call 6 of session 18, at the commit in carry22/COMMIT (v14): two more passes of
# compare.py, mlakit beside FlashInfer fa3 only, on the workloads whose order against fa3 flips
# between runs (the spread of one number is +-5-8% on these machines).
# Run from the repository root with carry ["carry22", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry22/COMMIT)
timeout 120 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j14 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
for pass in 1 2; do
  mkdir -p /tmp/v$pass
  MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare \
    COMPARE_ARGS="--overhead none --methods mlakit,flashinfer_fa3 --workload 1x32768 --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 1x16384 --workload 100x999 --workload 8x999+200" \
    timeout 150 scripts/gpu-check /tmp/v$pass > /tmp/v$pass/console.txt 2>&1
  el "pass $pass"; grep -E "^  compare |matmul ceiling" /tmp/v$pass/summary.txt
done
tar czf $OUT/v.tgz -C /tmp v1 v2; el done
