#!/bin/bash
# Session 34 call 2: ping-pong issue turns at (128, 128). Call 1 found mlakit's sm90 kernel 5-9%
# behind FlashInfer's fa3 on the long (128, 128) work (1x16384 641 against 702). FlashInfer's
# Hopper kernel takes issue turns between its two consumer warpgroups when Dvo <= 128 (its
# UseSchedulerBarrier rule), FA3 when the head dim is <= 128; mlakit measured turns slower at
# (192, 128) five times. Build `pp` (working tree on 9f98a2b/ca63f5d + the turns, on by default for
# Dqk <= 128 only: Sm90Shape::kPingPong) against `base` (9f98a2b's kernel).
# carry ["carry1"].
# Prediction: at (128, 128) the S product is 8 k-steps (512 tensor cycles per warpgroup) against a
# ~1800-cycle softmax, so a warpgroup's products fit inside the other's softmax and turns keep the
# tensor pipe fed: long work +3-8%, ragged batches level to +3%. (192, 128) unchanged (same SASS).
set -u
source bench/device_env.sh
T=carry1/tests/mlakit_gpu_tests
timeout 200 $T --gtest_filter='*sm90_d128x128*' > $OUT/tests_d128.txt 2>&1; echo "tests rc=$?"
tail -3 $OUT/tests_d128.txt
el tests
ab_rounds $OUT/ab_d128.txt 3 carry1/ab/base carry1/ab/pp -- --kernel sm90 --all --iters 20 --warmup-ms 0 --no-check --dqk 128 --dvo 128
el ab128
ab_rounds $OUT/ab_d192.txt 1 carry1/ab/base carry1/ab/pp
el ab192
F='*RaggedLengthsCausalAndNot/sm90_d128x128_bf16*:*LengthsAroundEveryTileBoundary/sm90_d128x128_bf16*:*CausalQueryShorterThanKv/sm90_d128x128_bf16*'
for tool in synccheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$F" > $OUT/san_$tool.txt 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/san_$tool.txt | tail -3
done
el san
