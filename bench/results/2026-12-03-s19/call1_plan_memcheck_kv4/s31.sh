#!/bin/bash
# Device call 1 of session 19. carry23/: base = v14's mlakit-bench (eeae8ea, COMMIT_BASE),
# mlakit_gpu_tests of v14; kv4 (-DMLAKIT_SM90_EXP_KV=4: every other kv tile loaded, half the
# L2 -> shared bytes) and kv2 (-DMLAKIT_SM90_EXP_KV=2: no K/V loads) built at carry23/COMMIT.
# 1. session 18's prepared s30.sh: plan() host cost from C++ and memcheck over v14's sm90 plans;
# 2. the oracles against base, two rounds interleaved, nvidia-smi sampled every 100 ms.
# Run from the repository root with carry ["carry23"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry23/COMMIT_BASE)
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 carry23/mlakit_gpu_tests \
  --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Kernels/CudaScale.BatchInvariantBitwise/sm90:-*SplitKeyRanges*' > $OUT/memcheck_v14.log 2>&1 & S=$!
timeout 40 carry23/base/mlakit-bench --plan-only 2>&1 | tee $OUT/plan_only.txt | tail -14
el plan
wait $S; echo "memcheck rc=$?: $(grep 'ERROR SUMMARY' $OUT/memcheck_v14.log | tail -1)"; grep -E "^\[  (PASSED|FAILED) " $OUT/memcheck_v14.log
el memcheck
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 > $OUT/smi.csv 2>&1 & SMI=$!
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 100x999 --workload 8x999+200"
for r in 1 2; do
  for b in base kv4 kv2; do
    echo "== round $r $b $(date +%T.%N | cut -c1-12)"
    timeout 60 carry23/$b/mlakit-bench --kernel sm90 $WL --iters 20 --no-check 2>&1 | grep -E "cuda:0/|FAIL|rror"
  done
done > $OUT/ab_bench.txt 2>&1
kill $SMI
cat $OUT/ab_bench.txt; el done
