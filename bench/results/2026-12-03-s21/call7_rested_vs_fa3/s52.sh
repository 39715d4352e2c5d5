#!/bin/bash
# Device call 7 of session 21: mlakit beside FlashInfer fa3 on the two power-capped workloads
# (1x32768, H=128 1x8192) and 1x16384, back to back (compare.py's method, the table's) and with
# the GPU rested 5 ms before each timed call (compare.py --gap-ms 5, new): is fa3's 1-2% lead on
# the long work energy (it would then hold rested too) or cycles? v15 (the tree, built here).
# Run from the repository root with carry [".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
timeout 170 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1" || { tail -5 /tmp/pyb.txt; }
el pybuild
FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi.txt 2>&1 || tail -5 /tmp/fi.txt
el flashinfer
export PYTHONPATH="$PWD/build-py/python:$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
for gap in 0 5; do
  echo "== gap $gap ms"
  timeout 100 python3 bench/compare.py --workload 1x32768 --workload v3_128h_8192 --workload 1x16384 \
    --methods mlakit,flashinfer_fa3 --gap-ms $gap --overhead none --no-ceilings --plan-iters 5 \
    --json $OUT/compare_gap$gap.json 2>&1 | grep -E "^ *(1x32768|v3_128h_8192|1x16384)|mlakit|fa3|rror|ms" | head -30
  el gap$gap
done > $OUT/rested_vs_fa3.txt 2>&1
cat $OUT/rested_vs_fa3.txt
