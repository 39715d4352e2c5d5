#!/bin/bash
# Session 34 call 7: the GPU tests of v20 (2bee125) that call 5 did not run: the sm90 (192, 128)
# fp16 prefill tests, the split-K layout, the scale tests (64k tokens, 1000 sequences, 64-bit
# offsets), graphs, the MLA step; then memcheck over three sm90 (192, 128) prefill tests.
# carry ["carry1"].
set -u
source bench/device_env.sh
T=carry1/tests/mlakit_gpu_tests
F='*sm90_d192x128_fp16*:Shapes/CudaSplitK.*sm90*:Kernels/CudaScale.*sm90*:Kernels/CudaGraph.*sm90*:Shapes/CudaMlaStep.*'
timeout 120 $T --gtest_filter="$F" > $OUT/tests.txt 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" $OUT/tests.txt | head -6
el tests
M='*RaggedLengthsCausalAndNot/sm90_d192x128_bf16*:*CausalQueryShorterThanKv/sm90_d192x128_bf16*:Shapes/CudaSplitK.EqualsConcatenatedKAndReference/sm90_h16_16_d128r64v128_bf16_causal'
timeout 45 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter="$M" > $OUT/memcheck.txt 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.txt | tail -3
el memcheck
