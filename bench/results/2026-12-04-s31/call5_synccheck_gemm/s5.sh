#!/bin/bash
# Session 31 call 5: call 4's synccheck ran past its limit inside the tuned GEMM's test (2.3-2.4 s
# under synccheck in session 30). That test alone under synccheck, then the MLA tests of the
# filter after it, each with its own limit, so a hang shows which test and how long.
# carry ["carry1"]. Prediction: the test alone finishes in seconds (call 4's hang came from the
# process state after the tests before it, or from that machine).
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
G=carry1/mlakit_gpu_tests
sc() {  # name, timeout, filter
  timeout "$2" compute-sanitizer --tool synccheck --error-exitcode 9 $G --gtest_filter="$3" > $OUT/$1.txt 2>&1
  echo "$1: rc=$? $(grep -c '^\[       OK' $OUT/$1.txt) ok; $(grep -E 'ERROR SUMMARY' $OUT/$1.txt)"
  grep -E '^\[       OK|^\[  FAILED|^\[ RUN' $OUT/$1.txt | tail -3
}
sc sync_gemm_alone 120 'DTypes/CudaMlaGemm.TunedGemmMatchesFirstChoiceAndReference/bf16'
el gemm_alone
sc sync_prefill_then_gemm 180 'Kernels/CudaGraph*/sm90:Types/CudaMerge.*:BlockSizes/CudaMlaGatherOp.*:DTypes/CudaMlaGemm.TunedGemmMatchesFirstChoiceAndReference/bf16'
el prefill_then_gemm
