#!/bin/bash
# Device call 2 of session 16: where the graph-replayed MLA step's device time goes at N=100,
# budget 8192 (issue 7's missed x3 over FlashInfer): compare_mla --timeline for the FlashInfer path
# and mlakit's graph path, summarized per kernel (bench/timeline_kernels.py), and the up-projection
# GEMM alone at the step's shapes (gemm_probe.py); then mlakit's path again with PDL launches. carry ["carry11", ".peers"].
set -u
export MLAKIT_GIT_COMMIT=$(cat carry11/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
D=bench/results/2026-12-03-s16/call2_3efb73c_timeline  # gemm_probe.py lives beside this script
mkdir -p /tmp/g
pyb() {  # pyb DIR [extra cmake args]: the Python binding, CUDA on, sm90a
  local d=$1; shift
  cmake -S . -B $d -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF \
    -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) "$@" > /tmp/$d.txt 2>&1 &&
    cmake --build $d -j8 >> /tmp/$d.txt 2>&1 || tail -5 /tmp/$d.txt
}
pyb build-py & P1=$!
pyb build-pdl -DMLAKIT_PDL=ON & P2=$!
wait $P1 $P2; grep -h "PDL launches" /tmp/build-py.txt /tmp/build-pdl.txt
el pybuild
python3 $D/gemm_probe.py > /tmp/g/gemm_probe.txt 2>&1; cat /tmp/g/gemm_probe.txt; el gemm
cp carry11/mlakit-bench build-py/
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare-mla \
  COMPARE_MLA_ARGS="--cases 100:8192,1:8192 --paths flashinfer_fa3,mlakit_step_graph --reps 3 --timeline /tmp/g/timeline.json" \
  timeout 330 scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare-mla; grep -E "total .* ms wall|host share " /tmp/g/console.txt | head -20
python3 bench/timeline_kernels.py /tmp/g/timeline.json --top 10 > /tmp/g/timeline_kernels.txt 2>&1; cat /tmp/g/timeline_kernels.txt
el timeline
# The same graph path with every mlakit kernel launched with PDL (build option MLAKIT_PDL=ON).
PYTHONPATH=$PWD/build-pdl/python:$PWD/python timeout 120 python3 bench/compare_mla.py --cases 100:8192,1:8192 \
  --paths mlakit_step_graph --reps 3 --timeline /tmp/g/timeline_pdl.json --json /tmp/g/compare_mla_pdl.json > /tmp/g/console_pdl.txt 2>&1
grep -E "total .* ms wall" /tmp/g/console_pdl.txt | head
python3 bench/timeline_kernels.py /tmp/g/timeline_pdl.json --top 6 > /tmp/g/timeline_kernels_pdl.txt 2>&1; cat /tmp/g/timeline_kernels_pdl.txt
gzip -f /tmp/g/timeline.json /tmp/g/timeline_pdl.json
tar czf $OUT/g.tgz -C /tmp g; el done
