#!/bin/bash
# Device call 5 of session 20, at the commit in carry30/COMMIT (v15): compare_mla.py again, with the
# budget-2048 case, to see how much the FlashInfer path's ratio moves between runs (call 4 read
# x4.31 at N=100 budget 8192, session 17's run x2.39: that path is host-bound).
# Run from the repository root with carry ["carry30", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry30/COMMIT)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
lscpu | grep -E "Model name|^CPU\(s\)|MHz" | head -4
mkdir -p /tmp/g
timeout 100 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j14 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare-mla \
  COMPARE_MLA_ARGS="--cases 1:8192,100:8192,100:2048 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph --reps 5" \
  timeout 230 scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare-mla; grep -E "host per step|target|total .* ms wall" /tmp/g/console.txt | head -40
tar czf $OUT/g.tgz -C /tmp g; el done
