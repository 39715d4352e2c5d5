#!/bin/bash
# Device call 7 of session 19: compute-sanitizer synccheck and racecheck over v14's
# (eeae8ea, carry26/COMMIT) sm90, graph, split-K and MLA GPU tests, with scripts/gpu-check's
# sanitize filter (racecheck without the MLA step tests, whose cuBLAS GEMMs it cannot model).
# carry26/mlakit_gpu_tests = build-cuda's at eeae8ea (stripped). Run with carry ["carry26"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
T=carry26/mlakit_gpu_tests
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90_h16_16_d128r64v128_bf16_causal:BlockSizes/CudaMlaGatherOp.*:Shapes/CudaMlaStep.*/sm90_h16_bs16_*:Upload/CudaMlaGraph.*/upload_in_run'
for tool in synccheck racecheck; do  # memcheck at v14: call1
  f="$F"; [ $tool = racecheck ] && f="${F%:Shapes/CudaMlaStep*}"
  lim=110; [ $tool = racecheck ] && lim=130
  timeout $lim compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > $OUT/$tool.log 2>&1
  echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | tail -1) $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$tool.log | tr '\n' ' ')"
  el $tool
done
