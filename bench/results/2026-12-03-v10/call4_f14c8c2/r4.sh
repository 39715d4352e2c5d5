#!/bin/bash
# Session 12, device call 4 (f14c8c2): the sm90 GPU tests call 3's 150 s limit cut off.
set -u
T=carry4/bld/tests/mlakit_gpu_tests
F='Kernels/CudaScale.*/sm90:Shapes/CudaSplitK.*/sm90*:KernelsHeadDimsAndTypes/CudaPrefill.SplitPlansBitwiseStableAcrossRuns/sm90*:KernelsHeadDimsAndTypes/CudaPrefill.SplitKeyRangesMatchUnsplitPlans/sm90_d192x128_fp16:KernelsHeadDimsAndTypes/CudaPrefill.SplitKeyRangesMatchUnsplitPlans/sm90_d128x128*'
timeout 265 $T --gtest_filter="$F" > $OUT/gpu_tests_rest.log 2>&1; echo "rc=$?"
grep -E "^\[  (FAILED|PASSED) |tests ran|SKIPPED \]|^\[       OK" $OUT/gpu_tests_rest.log | tail -24
