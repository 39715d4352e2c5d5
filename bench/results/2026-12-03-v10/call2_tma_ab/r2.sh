#!/bin/bash
# Session 12, device call 2: GPU tests with the TMA-store epilogue, A/B bench (old = 40aad55,
# tma = TMA-store epilogue, nots = the same build with MLAKIT_SM90_TMA_STORE=0), memcheck and
# racecheck over the sm90 prefill tests.
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
T=carry4/bld/tests/mlakit_gpu_tests
timeout 220 $T > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc=$?"
grep -E "^\[  (FAILED|PASSED) |tests ran|Failure|SKIPPED \]" $OUT/gpu_tests.log | tail -12; el tests
WL="--workload 8x999+200 --workload 100x999 --workload 1x16384 --workload v3_128h_8192 --workload 1x999 --workload 1x32768 --workload ctx_8x1024_vs_4096"
{ for r in 1 2; do for b in old tma nots; do
  echo "== bench $b round $r"
  timeout 60 carry4/$b/mlakit-bench --kernel sm90 $WL --iters 30 2>&1 | grep -E "cuda:0"
done; done; } > $OUT/bench.txt 2>&1
cat $OUT/bench.txt; el bench
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16'
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter="$F" > /tmp/mc.txt 2>&1; echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|tests ran|PASSED|FAILED" /tmp/mc.txt | tail -4; el memcheck
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 $T --gtest_filter="*CudaPrefill.StridedOutputView/sm90_d192x128_bf16:*CudaPrefill.SplitKeyRanges*/sm90_d192x128_bf16:*CudaPrefill.CausalQueryShorterThanKv/sm90_d192x128_bf16" > /tmp/rc.txt 2>&1; echo "racecheck rc=$?"
grep -E "RACECHECK SUMMARY|ERROR SUMMARY|tests ran|PASSED|FAILED" /tmp/rc.txt | tail -4; el racecheck
tar czf $OUT/san.tgz -C /tmp mc.txt rc.txt
