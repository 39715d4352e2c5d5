#!/bin/bash
# Session 34 call 5: v17 (session 23's wgmma descriptors built once per product and advanced by a
# 32-bit add per k-step, instead of rebuilt per k-step) at (128, 128). Calls 3-4 (ncu, base clock,
# 1x16384 d128x128): fa3 takes 8.3% fewer cycles (2.53 M against 2.75 M), its tensor pipe 82.1%
# busy against 75.9%, and it executes 43 M uniform-datapath instructions against mlakit's 108 M
# (branches 5.3 M against 15.8 M). At (192, 128) v17 measured -1.6 to +0.2% (session 23): there
# S is 12 k-steps per tile and the tile longer. `v17` (the patch on 9f98a2b) against `base`.
# carry ["carry1"].
# Prediction: at (128, 128) +1-3% on long work (the per-tile issue slots matter more when the
# tile's tensor work is 2048 cycles); at (192, 128) level, as in session 23.
set -u
source bench/device_env.sh
T=carry1/tests/mlakit_gpu_tests
timeout 150 $T --gtest_filter='*sm90_d128x128*:*sm90_d192x128_bf16*' > $OUT/tests.txt 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) " $OUT/tests.txt | head -5
el tests
timeout 60 carry1/ab/v17 --kernel sm90 --dqk 128 --dvo 128 --workload 8x999+200 --workload ctx_8x1024_vs_4096 --iters 3 2>&1 | grep -E "cuda:0" > $OUT/check_v17.txt; cat $OUT/check_v17.txt
el check
ab_rounds $OUT/ab_d128.txt 3 carry1/ab/base carry1/ab/v17 -- --kernel sm90 --all --iters 20 --warmup-ms 0 --no-check --dqk 128 --dvo 128
el ab128
ab_rounds $OUT/ab_d192.txt 1 carry1/ab/base carry1/ab/v17
el ab192
