#!/bin/bash
# Session 35 prepared call 2 (not run): the three sanitizers over v21's sm90 tests, sharded so each
# process stays under the call's limit (the whole sm90 suite under a sanitizer takes > 300 s per
# process, session 32). carry ["carry1"] from prepare_carry.sh. Any error fails the call's check.
set -u
source bench/device_env.sh
T=carry1/tests/mlakit_gpu_tests
F='*RaggedLengthsCausalAndNot/sm90_d192x128_bf16*:*CausalQueryShorterThanKv/sm90_d128x128_bf16*:*Window*sm90_d192x128_bf16*:Shapes/CudaSplitK.EqualsConcatenatedKAndReference/sm90_h16_16_d128r64v128_bf16_causal'
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$F" > $OUT/$tool.txt 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/$tool.txt | tail -3
  el $tool
done
