#!/bin/bash
# Device call 1 of session 23, at the commit in carry1/COMMIT (kernel v16b, 0a49c71's code):
# session 22's prepared s8.sh, extended.
#  1. every GPU test, and compute-sanitizer memcheck, racecheck and synccheck with
#     scripts/gpu-check's sanitize filter (racecheck without the MLA step tests, as gpu-check),
#     side by side, while the Python binding builds for call 2 (the machine keeps build-py warm);
#  2. v15 (81ab9c0, carry1/mb-v15) against v16b on H=128 4096 / 8192 themselves (no --heads
#     override this time), 1x999 and 8x999+200; three rounds, --warmup-ms 200 (under the power
#     cap) and 0. Prediction: v16b = v15 within 1% on H=128 (its consumer is v15's source),
#     1x999 and 8x999+200 v16b 2-4% faster (session 22's call 7).
# Run from the repository root with carry ["carry1", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
mkdir -p /tmp/t; T=carry1/mlakit_gpu_tests
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90_h16_16_d128r64v128_bf16_causal:BlockSizes/CudaMlaGatherOp.*:Shapes/CudaMlaStep.*/sm90_h16_bs16_*:Upload/CudaMlaGraph.*/upload_in_run'
timeout 330 $T > /tmp/t/gpu_all.log 2>&1 & A=$!
declare -A P
for tool in memcheck racecheck synccheck; do
  f="$F"; [[ $tool == racecheck ]] && f="${F%:Shapes/CudaMlaStep*}"
  timeout 330 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > /tmp/t/$tool.log 2>&1 & P[$tool]=$!
done
timeout 200 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j8 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
wait $A; echo "all GPU tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" /tmp/t/gpu_all.log | head -12
for tool in memcheck racecheck synccheck; do
  wait ${P[$tool]}; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/t/$tool.log | tail -1), $(grep -cE '^\[       OK \]' /tmp/t/$tool.log) tests OK"
done
el tests
cp /tmp/t/*.log $OUT/
for wu in 200 0; do
  for r in 1 2 3; do
    for b in v15 v16b; do
      timeout 60 carry1/mb-$b --kernel sm90 --workload v3_128h_4096 --workload v3_128h_8192 --workload 1x999 \
        --workload 8x999+200 --iters 20 --warmup-ms $wu --no-check 2>&1 | grep "cuda:0/" | awk -v b=$b -v r=$r -v wu=$wu '{print "warmup-ms " wu, b, "r" r, $0}'
    done
  done
done > $OUT/ab_h128.txt 2>&1
cat $OUT/ab_h128.txt; el ab
