#!/bin/bash
# Session 26, call 6: how early to claim. v19 asks the scheduler after an item's last K load
# (call 2: +1.7-2.3% on the ragged batches over asking after its last V). lead1 / lead2
# (MLAKIT_SM90_CLAIM_EXTRA_TILES=1 / 2) ask one / two K loads earlier.
# Prediction: lead1 +0.5-1.5% on 100x999 and 8x999+200 if the hand-over chain (~3 us) is still
# longer than the lead; lead2 level or below (a block claims an item ~4 tiles before it can start
# it, which the late claim of session 17 found costs the launch's tail).
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
for b in lead1 lead2; do
  timeout 60 carry1/mb-$b --kernel sm90 --all --iters 3 > $OUT/smoke_$b.txt 2>&1; echo "smoke $b rc=$? PASS=$(grep -c PASS $OUT/smoke_$b.txt)"
done
el smoke
B="v19 lead1 lead2"
for r in 1 2 3; do
  for b in $B; do
    timeout 60 carry1/mb-$b --kernel sm90 --all --iters 20 --warmup-ms 0 --no-check 2>&1 | grep "cuda:0/" \
      | awk -v b=$b -v r=$r '{print b, "r" r, $0}'
  done
done > $OUT/ab.txt 2>&1
for w in $(awk '{print $3}' $OUT/ab.txt | sort -u); do
  for b in $B; do echo "$w $b $(grep "^$b r. $w " $OUT/ab.txt | awk '{print $8}' | sort -n | tr '\n' ' ')"; done
done
el ab
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192*:Kernels/CudaScale.*/sm90*:Kernels/CudaGraph*/sm90:Upload/CudaMlaGraph.*'
timeout 150 carry1/tests-lead2 --gtest_filter="$F" > $OUT/gpu_lead2.log 2>&1; echo "lead2 tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" $OUT/gpu_lead2.log | head
el tests
