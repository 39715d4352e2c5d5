#!/bin/bash
# Session 33 call 3. carry ["carry1", ".peers"]; carry1/trace/mlakit-bench: 55e6fc6 (the merge
# reverted, the kernel as at 7646aad) with -DMLAKIT_SM90_TRACE=1.
# 1. Block timelines of the run-major order on the two step shapes call 2 traced with the merge:
#    where did the merged order lose 7.5% on the budget-2048 launch (start or tail)?
#    Prediction: the merge's loss is in the start (its first round reads both long prompts' K/V
#    and Q at once) and in a longer tail, the run-major launch's start shorter.
# 2. compare_mla.py at N=100, budget 8192, every path after 300 ms of idle (--rest-ms 300): each
#    path from the same (rested) power state, the neutral order stop 32 left open.
#    Prediction: mlakit ~54-55 ms (as call 7 of session 32), FA2's path a few % faster than in
#    call 1's back-to-back turns, FlashInfer's host-bound path about as before.
set -u
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT}
rm -rf build-py
source bench/device_env.sh binding flashinfer
mkdir -p /tmp/tr
{
  MLAKIT_SM90_TRACE_FILE=/tmp/tr/s8192 timeout 60 carry1/trace/mlakit-bench --kernel sm90 --lens 799,7x999,400 --kv-lens 999,7x999,400 --causal --heads 16 --iters 5 --no-check 2>&1 | grep cuda:0
  MLAKIT_SM90_TRACE_FILE=/tmp/tr/s2048 timeout 60 carry1/trace/mlakit-bench --kernel sm90 --lens 949,999,100 --kv-lens 999,999,100 --causal --heads 16 --iters 5 --no-check 2>&1 | grep cuda:0
  for f in /tmp/tr/*.txt; do echo "== $f"; python3 bench/sm90_trace.py "$f" | head -30; done
} > $OUT/trace.txt 2>&1
grep -E "==|launch|items .*before" $OUT/trace.txt
(cd /tmp/tr && tar czf $OUT/traces.tgz *.txt)
el trace
mla_record $OUT/rest --cases 100:8192 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native --rest-ms 300
grep -A6 "^useful work" $OUT/rest/compare_mla.log
el rest
