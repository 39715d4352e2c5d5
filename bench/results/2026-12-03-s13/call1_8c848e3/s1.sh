#!/bin/bash
# Session 13, device call 1: L2-prefetch variants (Q; Q + K/V two tiles ahead), the per-block
# tensor-map rewrite oracle, ping-pong + softmax after P V, against v10 (base); a batch-size sweep
# of 999-token sequences beside FlashInfer fa3 (fixed cost per launch); the N=1 and N=100 MLA
# step timelines (what the host share is made of).
set -u
export MLAKIT_GIT_COMMIT=$(cat carry4/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
WL="--workload 8x999+200 --workload 100x999 --workload 1x16384 --workload v3_128h_8192 --workload 1x32768 --workload 1x999"
{ for r in 1 2; do for b in base pq pqkv pm ppsa; do
  echo "== bench $b round $r"
  timeout 45 carry4/v/$b/mlakit-bench --kernel sm90 $WL --iters 30 --no-check 2>&1 | grep -E "cuda:0"
done; done; } > $OUT/variants.txt 2>&1
el variants; cat $OUT/variants.txt
timeout 40 carry4/v/pm/mlakit-bench --kernel sm90 --workload 8x999+200 --workload 1x999 --iters 3 2>&1 | grep -E "cuda:0|FAIL|check" | head -5
timeout 60 bash -c 'cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1' || tail -20 /tmp/pyb.txt
cp carry4/v/base/mlakit-bench build-py/; el pybuild
mkdir -p /tmp/g
SW="--custom 1 --custom 1x128 --custom 1x999 --custom 2x999 --custom 4x999 --custom 8x999 --custom 16x999 --custom 32x999 --custom 100x999 --custom 1x4096@128 --custom 1x2048@128"
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare,compare-mla \
  COMPARE_ARGS="$SW --methods mlakit,flashinfer_fa3 --overhead none --no-ceilings" \
  COMPARE_MLA_ARGS="--cases 1:8192,100:8192 --paths fa2_vllm,mlakit_step,mlakit_step_graph --reps 3 --timeline /tmp/g/timeline.json" \
  timeout 330 scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare; grep -E "timeline|gaps|mla N=|target|TFLOP|ms " /tmp/g/console.txt | head -80
tar czf $OUT/g.tgz -C /tmp g
