#!/bin/bash
# Session 33 call 1: the MLA step's useful work as a rate (new: compare_mla.py's TFLOP/s per path
# against the run's matrix-product ceiling, measured after every pass; mlakit-bench seed's work
# lines), in a pass beside the peers and in C++ with both head counts; then block timelines of
# the v19 kernel (a build with -DMLAKIT_SM90_TRACE=1, carry1/trace) on 8x999+200 (= the N=100
# step 0's attention), the N=100 step 1's attention, 100x999 and 1x999.
# carry ["carry1", ".peers"].
# Predictions: N=100 budget 8192 at ~440-470 TFLOP/s of useful work (25.65 TFLOP in 55-58 ms),
# 56-59% of the ceiling; x3 over FlashInfer's path asks ~585 TFLOP/s (~74%) on a 131 ms host. The
# timelines: per item ~2.2-2.4 us beyond its kv tiles, launch tail 3-6% on the 8-sequence
# launches and ~1% on 100x999.
set -u
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT}
rm -rf build-py
source bench/device_env.sh binding flashinfer
grep -m2 -iE "flashinfer.*(ok|version)|error" /tmp/device_env_fi.txt
el setup
mla_record $OUT/mla --cases 1:8192,100:8192,100:2048 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native
grep -A6 "^useful work" $OUT/mla/compare_mla.log
el mla
{
  for h in 16 128; do
    timeout 120 carry1/mlakit-bench seed --requests 100 --budgets 8192,2048 --modes graph --reps 3 --no-check --heads $h
  done
} > $OUT/seed.txt 2>&1
grep -E "^(Heads|Token budget|Useful|Total step time, wall)" $OUT/seed.txt
el seed
mkdir -p /tmp/tr
run_trace() {  # name, mlakit-bench workload args
  local n=$1; shift
  MLAKIT_SM90_TRACE_FILE=/tmp/tr/$n timeout 60 carry1/trace/mlakit-bench --kernel sm90 "$@" --iters 5 --no-check 2>&1 | grep -E "cuda:0"
}
{
  run_trace s0_8x999+200 --workload 8x999+200
  run_trace s1_step1 --lens 799,7x999,400 --kv-lens 999,7x999,400 --causal --heads 16
  run_trace big_100x999 --workload 100x999
  run_trace one_1x999 --workload 1x999
  for f in /tmp/tr/*.txt; do echo "== $f"; python3 bench/sm90_trace.py "$f"; python3 bench/sm90_trace_phases.py "$f"; done
} > $OUT/trace.txt 2>&1
tail -80 $OUT/trace.txt
(cd /tmp/tr && tar czf $OUT/traces.tgz *.txt)
el trace
