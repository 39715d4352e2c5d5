#!/bin/bash
# Prepared for the next session's first device call (not run: this session's device time ran
# out): v15's racecheck and synccheck with scripts/gpu-check's sanitize filter (v15 changed only
# arithmetic inside the softmax; v14 was clean under both), and every GPU test of the v15 build in
# one uninterrupted run (session 20 covered them across two calls).
# Build here: make -C build-cuda -j2 mlakit_gpu_tests; copy build-cuda/tests/mlakit_gpu_tests into
# carryN/ (stripped), the commit into carryN/COMMIT. Run from the repository root with carry ["carryN"].
set -u
C=${CARRY:-carry31}
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat $C/COMMIT)
T=$C/mlakit_gpu_tests
# scripts/gpu-check's default sanitize filter (SAN_FILTER there).
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90_h16_16_d128r64v128_bf16_causal:BlockSizes/CudaMlaGatherOp.*:Shapes/CudaMlaStep.*/sm90_h16_bs16_*:Upload/CudaMlaGraph.*/upload_in_run'
timeout 280 $T > $OUT/gpu_all.log 2>&1; echo "all GPU tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $OUT/gpu_all.log | tail -8; el tests
for tool in racecheck synccheck; do
  timeout 140 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$F" > $OUT/$tool.log 2>&1
  echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | tail -1)"; el $tool
done
