#!/bin/bash
# Session 26, call 3: v19 at 14e205b (DECOUPLED + CLAIM_AT_LAST_K on by default): every GPU test
# that runs the sm90 kernel (the sm80 kernel is unchanged), then memcheck, racecheck and
# synccheck over sm90 prefill tests (ragged lengths, split keys, graph re-plan) and the MLA graph.
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_*:Kernels/CudaScale.*/sm90*:Shapes/CudaSplitK.*/sm90*:Kernels/CudaGraph*/sm90:Shapes/CudaMlaStep.*/sm90*:Layouts/CudaMlaSteps.*:Upload/CudaMlaGraph.*:CudaMlaChunks.*:CudaPrefillLarge.*:CudaStreamGraph.*:CudaPlanReuse.*:Types/CudaMerge.*:BlockSizes/*'
timeout 250 carry1/tests --gtest_filter="$F" > $OUT/gpu_sm90.log 2>&1; echo "sm90 GPU tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]|tests ran" $OUT/gpu_sm90.log | head -12
el tests
S='KernelsHeadDimsAndTypes/CudaPrefill.RaggedLengths*/sm90_d192x128_bf16:KernelsHeadDimsAndTypes/CudaPrefill.SplitKeyRanges*/sm90_d128x128_bf16:Kernels/CudaGraph*/sm90:*BatchInvariantBitwiseTailSplit/sm90'
for tool in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 carry1/tests --gtest_filter="$S" > /tmp/san_$tool.log 2>&1
  echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san_$tool.log | tail -1) $(grep -c '^\[       OK' /tmp/san_$tool.log) ok"
done | tee $OUT/sanitizers.txt
el sanitizers
