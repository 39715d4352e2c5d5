#!/bin/bash
# Device call 5 of session 22, at the commit in carry4/COMMIT (v16: eager launches use the
# kernel parameter's tensor maps; the Python path through the DLPack exchange table):
#  1. the sm90, MLA, graph, invariance and large GPU tests (the capacity-buffer test now eager too)
#     and memcheck over the sm90 d192 prefill and graph tests, while the Python binding builds;
#  2. mlakit-bench A/B v15 (carry4/mlakit-bench-base) against v16 on the short launches, ABAB;
#     prediction (call 4's experiment): 1x999 and 799/200 ~-1 us, 2x999 +5%, the rest within noise;
#  3. compare.py beside FlashInfer fa3 / fa2, FA2, cuDNN, FlexAttention (the README's table).
# Run from the repository root with carry ["carry4", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( 540 - ($(date +%s) - t0) )); }
export MLAKIT_GIT_COMMIT=$(cat carry4/COMMIT)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
mkdir -p /tmp/g2 /tmp/t; T=carry4/mlakit_gpu_tests
timeout 170 $T --gtest_filter='*sm90*:*Mla*:*Graph*:*Invarian*:*Large*:-*sm80*' > /tmp/t/gpu_v16.log 2>&1 & A=$!
timeout 170 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:-*SplitKeyRanges*' > /tmp/t/memcheck_v16.log 2>&1 & S=$!
timeout 150 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j12 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
wait $A; echo "v16 gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]|Capacity.*(OK|FAILED)" /tmp/t/gpu_v16.log | head -12
wait $S; echo "memcheck rc=$?: $(grep 'ERROR SUMMARY' /tmp/t/memcheck_v16.log | tail -1)"; grep -cE "^\[       OK \]" /tmp/t/memcheck_v16.log; el tests
cp /tmp/t/*.log $OUT/ 2>/dev/null
for r in 1 2; do
  for b in mlakit-bench-base mlakit-bench; do
    timeout 60 carry4/$b --kernel sm90 --workload 1x999 --workload ctx_799_vs_200 --workload 8x999+200 \
      --workload 100x999 --lens 2x999 --causal --heads 16 --iters 50 2>&1 | grep "cuda:0/" | sed "s/^/$b r$r: /"
  done
done > $OUT/ab.txt 2>&1
cat $OUT/ab.txt; el ab
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout $(( $(left) - 5 )) scripts/gpu-check /tmp/g2 > /tmp/g2/console.txt 2>&1
el compare; sed -n '/compare 1x999/,$p' /tmp/g2/summary.txt | head -30
grep -E "^workload|^(1x999|8x999|100x999|1x16384|1x32768|ctx_|v3_)" /tmp/g2/compare.log | tail -70 | head -80
tar czf $OUT/g2.tgz -C /tmp g2; el done
