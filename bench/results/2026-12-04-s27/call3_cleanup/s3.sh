#!/bin/bash
# Session 27, call 3: the sm90 cleanup (per-warpgroup barrier ids through one helper pair, the
# V-cleared phase bits folded into clear_v_rows_past, the producer's bare scope gone; consumer
# SASS 7353 -> 7354 instructions at d192, no spills): every GPU test that runs the sm90 kernel,
# memcheck / racecheck / synccheck, an A/B against HEAD's build (v19), and where Python's plan()
# time goes after a GPU wait (bench/mla_plan_split_probe.py).
# Prediction: tests and sanitizers clean; the A/B level within +-1% (only the per-item tail moved).
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 60 carry1/mb-s27 --kernel sm90 --all --iters 3 > $OUT/smoke.txt 2>&1; echo "smoke rc=$? PASS=$(grep -c PASS $OUT/smoke.txt)"
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_*:Kernels/CudaScale.*/sm90*:Shapes/CudaSplitK.*/sm90*:Kernels/CudaGraph*/sm90:Shapes/CudaMlaStep.*/sm90*:Layouts/CudaMlaSteps.*:Upload/CudaMlaGraph.*:CudaMlaChunks.*:CudaPrefillLarge.*:CudaStreamGraph.*:CudaPlanReuse.*:Types/CudaMerge.*:BlockSizes/*'
timeout 250 carry1/tests-s27 --gtest_filter="$F" > $OUT/gpu_sm90.log 2>&1; echo "sm90 GPU tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $OUT/gpu_sm90.log | head -12
el tests
S='KernelsHeadDimsAndTypes/CudaPrefill.RaggedLengths*/sm90_d192x128_bf16:KernelsHeadDimsAndTypes/CudaPrefill.SplitKeyRanges*/sm90_d128x128_bf16:Kernels/CudaGraph*/sm90:*BatchInvariantBitwiseTailSplit/sm90'
for tool in memcheck racecheck synccheck; do
  timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 carry1/tests-s27 --gtest_filter="$S" > /tmp/san_$tool.log 2>&1
  echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/san_$tool.log | tail -1) $(grep -c '^\[       OK' /tmp/san_$tool.log) ok"
done | tee $OUT/sanitizers.txt
el sanitizers
ab_rounds $OUT/ab.txt 3 carry1/mb-v19 carry1/mb-s27
el ab
source bench/device_env.sh binding
for w in sync spin; do timeout 40 python3 bench/mla_plan_split_probe.py --iters 200 --wait $w 2>&1 | tee $OUT/plan_split_$w.txt; done
el done
