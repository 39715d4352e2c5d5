#!/bin/bash
# Device call 5 of session 17 (the last ~4 minutes of device time): the short workloads beside the
# peers with a heavy workload first, since the first workload of a compare.py run is slow for
# every method (clocks after idle). carry [".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 60 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
mkdir -p $OUT/g3
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare \
  COMPARE_ARGS="--overhead none --workload 100x999 --workload 1x999 --workload ctx_799_vs_200 --methods mlakit,flashinfer_fa3,sdpa_cudnn,fa2_varlen_padV" \
  timeout $(( 150 - ($(date +%s) - t0) )) scripts/gpu-check $OUT/g3 > $OUT/g3/console.txt 2>&1
el compare; grep -E "^  mlakit|^  flashinfer_fa3|^  sdpa_cudnn|^  fa2|^== " $OUT/g3/console.txt | tail -20
