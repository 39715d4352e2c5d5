#!/bin/bash
# Device call 1 of session 22. (a) Where compare.py's 1x999 interval goes (loop_cost.py, PDL on
# and off). Prediction: compare.py's 1x999 interval (~0.042 ms) equals the host period of one
# compare.py iteration (two event records and the call), and with the host kept ahead the interval
# is the kernel's ~0.025 ms; fa3's ~0.056 likewise its host period. (b) s21's prepared s53.sh:
# mlakit-bench --warmup-ms on the power-capped workloads (its prediction is in that script).
# Run from the repository root with carry [".peers", "carry1"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry1/COMMIT)
D=bench/results/2026-12-03-s22/call1_loop_cost
timeout 170 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1" || { tail -5 /tmp/pyb.txt; }
el pybuild
FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi.txt 2>&1 || tail -5 /tmp/fi.txt
el flashinfer
export PYTHONPATH="$PWD/build-py/python:$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
nproc; lscpu | grep -E "Model name|MHz" | head -3
for tag in pdl nopdl; do
  echo "== $tag"
  if [ $tag = nopdl ]; then export MLAKIT_DISABLE_PDL=1; fi
  TAG=$tag timeout 120 python3 $D/loop_cost.py 2>&1 | grep -v Warning | tail -12
  el $tag
done
unset MLAKIT_DISABLE_PDL
CARRY=carry1 timeout 200 bash bench/results/2026-12-03-s21/prepared_not_run/s53.sh
el s53
