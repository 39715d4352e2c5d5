#!/bin/bash
# Session 32 call 2: why synccheck hangs in the tuned GEMM's test after the merge's and the
# gather's tests in one process (session 31 calls 5-6; gpu-check now runs the merge's tests in a
# second process). Bounded: each run 75 s (the three tests' process takes ~10 s when it passes).
# carry ["carry1"].
# Prediction: a tool problem with cuBLAS's nvjet kernels (racecheck has two of them): with the
# nvjet kernels left uninstrumented the hang goes; with only they instrumented it stays; the
# host's stack during the hang sits in a stream/device synchronize (the device never finishes the
# GEMM) rather than in mlakit code.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
G=carry1/mlakit_gpu_tests
F='Types/CudaMerge.*:BlockSizes/CudaMlaGatherOp.*:DTypes/CudaMlaGemm.TunedGemmMatchesFirstChoiceAndReference/bf16'
which gdb cuda-gdb 2>&1 | head -2
sc() {  # name, timeout, filter, extra sanitizer args...
  local name=$1 to=$2 filt=$3; shift 3
  ( env ${SC_ENV:-MLAKIT_UNUSED=1} compute-sanitizer --tool synccheck --error-exitcode 9 "$@" $G --gtest_filter="$filt" > $OUT/$name.txt 2>&1 ) &
  local pid=$! t=0
  while kill -0 $pid 2>/dev/null && [ $t -lt $to ]; do sleep 1; t=$((t+1)); done
  if kill -0 $pid 2>/dev/null; then
    local tp=$(pgrep -n -f "mlakit_gpu_tests --gtest_filter")
    echo "$name: still running after ${to}s (test pid ${tp:-?}); host stacks:"
    if [ -n "$tp" ] && command -v gdb >/dev/null; then
      timeout 30 gdb -batch -ex "thread apply all bt 12" -p $tp > $OUT/$name.gdb.txt 2>&1
      grep -E '^#|^Thread' $OUT/$name.gdb.txt | head -60
    fi
    pkill -9 -f "mlakit_gpu_tests --gtest_filter"; pkill -9 -f compute-sanitizer; wait $pid 2>/dev/null
  else
    wait $pid; echo "$name: rc=$?"
  fi
  echo "  $(grep -c '^\[       OK' $OUT/$name.txt) ok; $(grep -E 'ERROR SUMMARY' $OUT/$name.txt)"
  grep -E '^\[       OK|^\[  FAILED|^\[ RUN' $OUT/$name.txt | tail -2
  el $name
}
sc repro 75 "$F"                                          # session 31's hang, again
sc nvjet_uninstrumented 75 "$F" --kernel-name-exclude kns=nvjet
sc nvjet_only 75 "$F" --kernel-name kns=nvjet
SC_ENV=CUDA_MODULE_LOADING=EAGER sc eager_loading 75 "$F"
sc merge_fp32_gather0 75 'Types/CudaMerge.MatchesReferenceWithInfinities/fp32:BlockSizes/CudaMlaGatherOp.FusedCacheWriteAndContextChunk/0:DTypes/CudaMlaGemm.TunedGemmMatchesFirstChoiceAndReference/bf16'
