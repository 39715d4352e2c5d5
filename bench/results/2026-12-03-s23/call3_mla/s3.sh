#!/bin/bash
# Device call 3 of session 23: issue 7 at v16b (HEAD in carry1/COMMIT): compare.py
# beside FlashInfer fa3 / fa2, FA2, cuDNN, FlexAttention, through scripts/gpu-check (steps
# flashinfer, compare), with the binding call 1 built (build-py). Carry ["carry1", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry1/COMMIT)
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
[ -f build-py/python/mlakit/_mlakit*.so ] || ls build-py/python/mlakit/ 2>&1 | head -3
mkdir -p /tmp/g2
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare-mla \
  timeout 540 scripts/gpu-check /tmp/g2 > /tmp/g2/console.txt 2>&1
el mla; grep -iE 'x[0-9.]+|host share|target' /tmp/g2/summary.txt | head -40
cp /tmp/g2/* $OUT/ 2>/dev/null; el done
