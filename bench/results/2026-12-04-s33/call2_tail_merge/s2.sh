#!/bin/bash
# Session 33 call 2: the tail merge (plan/tail_merge.h, df7e51e). carry ["carry1"]:
# carry1/mlakit-bench, carry1/tests/* at df7e51e; carry1/base/mlakit-bench at 7646aad (before the
# merge); carry1/trace/mlakit-bench: df7e51e with -DMLAKIT_SM90_TRACE=1.
# 1. every GPU test; memcheck over the sm90 prefill / graph / split-K / MLA-step tests (gpu-check's
#    sanitize filter) with the new order.
# 2. A/B, base against merge, alternated rounds in separate processes: the named workloads, the
#    seed's N=100 step 1 at budget 8192 (799+200 ctx, 7x999, 400) and step 1 at 2048 (949+50 ctx,
#    999, 100) as single launches, and the C++ seed step, graph mode, N=100, both budgets.
# 3. block timelines of the merged order on the two step shapes.
# Predictions (list-scheduling simulation with the measured item costs): the 8192 step's attention
# launch -2% (92.1 -> 90.5 us simulated), the 2048 step's -8 to -10%; 8x999+200 +1.5-2%; 100x999,
# 1x999 and the long workloads unchanged (within 0.5%; the long ones do not merge or merge a
# negligible tail). The seed step: -1 to -1.5% at budget 8192, -4 to -5% at 2048. Tail share of the
# 8192 step's launch 5.8% -> ~3%.
set -u
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT}
source bench/device_env.sh
timeout 300 carry1/tests/mlakit_gpu_tests > $OUT/gpu_tests.txt 2>&1; echo "gpu tests rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) " $OUT/gpu_tests.txt | head -20
el tests
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry1 GPU_CHECK_STEPS=sanitize SANITIZE_TOOLS=memcheck \
  timeout 200 scripts/gpu-check $OUT/san > /tmp/san.txt 2>&1; echo "memcheck rc=$?"
grep -hE "sanitize|ERROR SUMMARY" $OUT/san/summary.txt 2>/dev/null | head -5
rm -rf $OUT/san; mkdir -p $OUT/san; tail -20 /tmp/san.txt > $OUT/san/tail.txt
el memcheck
{
  ab_rounds /tmp/ab_named.txt 3 carry1/base/mlakit-bench carry1/mlakit-bench
  echo "== step 1 at budget 8192 (799+200 ctx, 7x999, 400)"
  ab_rounds /tmp/ab_s8192.txt 5 carry1/base/mlakit-bench carry1/mlakit-bench -- --kernel sm90 --lens 799,7x999,400 --kv-lens 999,7x999,400 --causal --heads 16 --iters 30 --no-check
  echo "== step 1 at budget 2048 (949+50 ctx, 999, 100)"
  ab_rounds /tmp/ab_s2048.txt 5 carry1/base/mlakit-bench carry1/mlakit-bench -- --kernel sm90 --lens 949,999,100 --kv-lens 999,999,100 --causal --heads 16 --iters 30 --no-check
} > $OUT/ab.txt 2>&1
cat $OUT/ab.txt
cat /tmp/ab_named.txt /tmp/ab_s8192.txt /tmp/ab_s2048.txt > $OUT/ab_rows.txt
el ab
for r in 1 2; do
  for b in base/mlakit-bench mlakit-bench; do
    echo "== round $r $b"
    timeout 120 carry1/$b seed --requests 100 --budgets 8192,2048 --modes graph --reps 3 --no-check 2>&1 |
      grep -E "^(Token budget|Useful work over|Total step time, wall|Total step time, device)"
  done
done > $OUT/seed_ab.txt 2>&1
cat $OUT/seed_ab.txt
el seed
mkdir -p /tmp/tr
{
  MLAKIT_SM90_TRACE_FILE=/tmp/tr/s8192 timeout 60 carry1/trace/mlakit-bench --kernel sm90 --lens 799,7x999,400 --kv-lens 999,7x999,400 --causal --heads 16 --iters 5 --no-check 2>&1 | grep cuda:0
  MLAKIT_SM90_TRACE_FILE=/tmp/tr/s2048 timeout 60 carry1/trace/mlakit-bench --kernel sm90 --lens 949,999,100 --kv-lens 999,999,100 --causal --heads 16 --iters 5 --no-check 2>&1 | grep cuda:0
  for f in /tmp/tr/*.txt; do echo "== $f"; python3 bench/sm90_trace.py "$f" | head -30; done
} > $OUT/trace.txt 2>&1
grep -E "==|launch|items .*before" $OUT/trace.txt
el trace
