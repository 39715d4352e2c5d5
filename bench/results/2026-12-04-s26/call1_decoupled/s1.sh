#!/bin/bash
# Session 26, call 1: v19 "decoupled consumers" (MLAKIT_SM90_DECOUPLED=1) checked and A/B'd
# against HEAD's kernel (b3a6090's, built at 258727e).
# What it changes: the two consumer warpgroups no longer meet at an item's end (own hand-over
# barriers, own half of Q, own output staging, V rows cleared by warpgroup 0 alone).
# Prediction: +3-6% on the ragged 999-token batches (100x999, 8x999+200, 1x999), long work
# within +-1% (items of 64-256 tiles).
# Carry: carry1/mb-base, carry1/mb-dec, carry1/tests-dec (stripped), carry1/COMMIT.
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 60 carry1/mb-dec --kernel sm90 --all --iters 3 > $OUT/smoke_dec.txt 2>&1; rc=$?
echo "smoke (checked) rc=$rc"; grep -c PASS $OUT/smoke_dec.txt; grep -E "FAIL|error" $OUT/smoke_dec.txt | head -5
el smoke
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_*:Kernels/CudaScale.*/sm90*:Shapes/CudaSplitK.*/sm90*:Kernels/CudaGraph*/sm90:*Invarian*:*Mla*:CudaPrefillLarge.*:CudaStreamGraph.*:CudaPlanReuse.*'
timeout 280 carry1/tests-dec --gtest_filter="$F" > $OUT/gpu_dec.log 2>&1; echo "dec tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]|tests? ran" $OUT/gpu_dec.log | head -20
el tests
if [ $rc -ne 0 ]; then echo "smoke failed: no A/B"; exit 0; fi
for r in 1 2 3 4; do
  for b in base dec; do
    timeout 60 carry1/mb-$b --kernel sm90 --all --iters 20 --warmup-ms 0 --no-check 2>&1 | grep "cuda:0/" \
      | awk -v b=$b -v r=$r '{print b, "r" r, $0}'
  done
done > $OUT/ab_dec.txt 2>&1
for w in $(awk '{print $3}' $OUT/ab_dec.txt | sort -u); do
  for b in base dec; do echo "$w $b $(grep "^$b r. $w " $OUT/ab_dec.txt | awk '{print $8}' | sort -n | tr '\n' ' ')"; done
done
el ab
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 carry1/tests-dec \
  --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.RaggedLengths*/sm90_d192x128_bf16' \
  > $OUT/racecheck.log 2>&1; echo "racecheck rc=$?: $(grep 'RACECHECK SUMMARY' $OUT/racecheck.log)"
el racecheck
