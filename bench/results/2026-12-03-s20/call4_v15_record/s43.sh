#!/bin/bash
# Device call 4 of session 20, at the commit in carry30/COMMIT (v15: the soft cap's tanh by ex2 and
# rcp, a consumer 28% smaller):
#  1. the sm90, MLA, graph, invariance and large GPU tests and memcheck over the sm90 d192 prefill
#     and graph tests, while the Python binding builds on the device;
#  2. compare.py beside FlashInfer fa3 / fa2, FA2, cuDNN and FlexAttention (the README's table);
#  3. compare_mla.py: the seed's workload at N=1 and N=100 (budget 8192), FA2 path, FlashInfer
#     fa3 path and mlakit's graph-replayed step (issue #7's figures).
# Run from the repository root with carry ["carry30", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( 470 - ($(date +%s) - t0) )); }
export MLAKIT_GIT_COMMIT=$(cat carry30/COMMIT)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
mkdir -p /tmp/g /tmp/g2 /tmp/t; T=carry30/mlakit_gpu_tests
timeout 150 $T --gtest_filter='*sm90*:*Mla*:*Graph*:*Invarian*:*Large*:-*sm80*' > /tmp/t/gpu_v15.log 2>&1 & A=$!
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:-*SplitKeyRanges*' > /tmp/t/memcheck_v15.log 2>&1 & S=$!
timeout 150 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j14 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
wait $A; echo "v15 gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" /tmp/t/gpu_v15.log | head
wait $S; echo "memcheck rc=$?: $(grep 'ERROR SUMMARY' /tmp/t/memcheck_v15.log | tail -1)"; el tests
tar czf $OUT/tests.tgz -C /tmp t
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout $(( $(left) - 130 )) scripts/gpu-check /tmp/g2 > /tmp/g2/console.txt 2>&1
el compare; sed -n '/compare 1x999/,$p' /tmp/g2/summary.txt | head -30
tar czf $OUT/g2.tgz -C /tmp g2
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare-mla \
  COMPARE_MLA_ARGS="--cases 1:8192,100:8192 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph --reps 5" \
  timeout $(( $(left) - 5 )) scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare-mla; grep -E "host per step|target|total .* ms wall" /tmp/g/console.txt | head -40
tar czf $OUT/g.tgz -C /tmp g; el done
