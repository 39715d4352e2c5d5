#!/bin/bash
# Device call 3 of session 17: the numbers of record at the head, beside the peers in one run.
#  1. the Python build on the device (defaults of the tree; 90a);
#  2. compare.py beside FlashInfer fa3 / fa2, FA2 and cuDNN (the README's kernel table);
#  3. compare_mla.py, N=1 and N=100 at budget 8192 (FA2 path, FlashInfer path, mlakit's graph path).
# Run from the repository root with carry [".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( 590 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 200 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=ON -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j14 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
mkdir -p /tmp/g /tmp/g2
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout $(( $(left) - 200 )) scripts/gpu-check /tmp/g2 > /tmp/g2/console.txt 2>&1
el compare; sed -n '/compare 1x999/,$p' /tmp/g2/summary.txt | head -30; grep -E "^  mlakit|^  flashinfer_fa3|^== " /tmp/g2/console.txt | tail -30
tar czf $OUT/g2.tgz -C /tmp g2
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare-mla \
  COMPARE_MLA_ARGS="--cases 1:8192,100:8192 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph --reps 5" \
  timeout $(( $(left) - 6 )) scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare-mla; grep -E "host per step|target|total .* ms wall" /tmp/g/console.txt | head -40
tar czf $OUT/g.tgz -C /tmp g; el done
