#!/bin/bash
# Session 26, call 2: the decoupled consumers (v19) with two timing knobs, A/B against HEAD's
# kernel. Call 1 found v19 level on 100x999 / 8x999+200, +5% on 1x999, +7.5% on ctx 799/200.
# Hypotheses for the ragged batches: (dp) the warpgroups re-lock at each item start, waiting
# together for the hand-over, so the dephase helps at every item; (ck) the hand-over chain
# (claim, decode, two slot round trips, Q's TMA) is now what the leading warpgroup waits for at
# an item's end, so claiming at the last K load (one tile earlier) shortens that wait.
# Builds: dec = DECOUPLED=1; dec_dp = + DEPHASE_FIRST_ONLY=0; dec_ck = + CLAIM_AT_LAST_K=1;
# dec_dp_ck = both. Prediction: ck +2-4% on 100x999 and 8x999+200; dp +0-2%.
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
for b in dec_ck dec_dp_ck; do
  timeout 60 carry1/mb-$b --kernel sm90 --all --iters 3 > $OUT/smoke_$b.txt 2>&1; echo "smoke $b rc=$? PASS=$(grep -c PASS $OUT/smoke_$b.txt)"
done
el smoke
B="base dec dec_dp dec_ck dec_dp_ck"
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
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_*:Kernels/CudaScale.*/sm90*:Shapes/CudaSplitK.*/sm90*:Kernels/CudaGraph*/sm90:Shapes/CudaMlaStep.*/sm90*:Upload/CudaMlaGraph.*:CudaPrefillLarge.*'
timeout 240 carry1/tests-dec_dp_ck --gtest_filter="$F" > $OUT/gpu_dec_dp_ck.log 2>&1; echo "dec_dp_ck tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" $OUT/gpu_dec_dp_ck.log | head -20
el tests
