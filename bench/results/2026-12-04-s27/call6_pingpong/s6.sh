#!/bin/bash
# Session 27, call 6: (a) ping-pong issue turns on the v19 kernel (MLAKIT_SM90_PINGPONG=1, build
# pp) against the default (v19, build s27), 3 rounds; pp's sm90 prefill / graph / invariance tests
# and racecheck; (b) plan()'s Python pieces and the N=1 step at f90faee (a torch block table goes
# to the extension as it is).
# Prediction (a): long work +1-3% (fa3's 2.8 points more tensor-pipe activity at the same clock,
# session 25), the ragged batches level or -1-2% (the turns couple the warpgroups per tile).
# (b): MlaStep.plan with a torch table at or below the NumPy table's time, hot and after a wait.
set -u
source bench/device_env.sh binding
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 60 carry1/mb-pp --kernel sm90 --all --iters 3 > $OUT/smoke_pp.txt 2>&1; echo "smoke pp rc=$? PASS=$(grep -c PASS $OUT/smoke_pp.txt)"
ab_rounds $OUT/ab.txt 3 carry1/mb-s27 carry1/mb-pp
el ab
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_*:Kernels/CudaGraph*/sm90:*BatchInvariant*/sm90:Shapes/CudaSplitK.*/sm90*:Shapes/CudaMlaStep.*/sm90*'
timeout 150 carry1/tests-pp --gtest_filter="$F" > $OUT/gpu_pp.log 2>&1; echo "pp tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $OUT/gpu_pp.log | head -12
S='KernelsHeadDimsAndTypes/CudaPrefill.RaggedLengths*/sm90_d192x128_bf16:*BatchInvariantBitwiseTailSplit/sm90'
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 carry1/tests-pp --gtest_filter="$S" > /tmp/san_race.log 2>&1
echo "racecheck pp rc=$?: $(grep -E 'RACECHECK SUMMARY' /tmp/san_race.log | tail -1) $(grep -c '^\[       OK' /tmp/san_race.log) ok" | tee $OUT/sanitizers_pp.txt
el tests
timeout 25 python3 bench/mla_plan_split_probe.py --iters 200 --wait sync 2>&1 | tee $OUT/plan_split_sync.txt
timeout 90 python3 bench/compare_mla.py --cases 1:8192 --paths mlakit_step_graph,mlakit_step_graph_native --reps 7 \
  --json $OUT/compare_mla.json > $OUT/compare_mla.log 2>&1; echo "compare_mla rc=$?"
grep -E "host per step|total .*wall|host share .*target" $OUT/compare_mla.log | tail -8
el done
