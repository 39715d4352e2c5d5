#!/bin/bash
# Session 36 prepared call 1: the v22 candidate (branch s36-v22-mask-bits) tested, reference-checked
# and timed against v20 (main) and v21, with one variant (v22s). carry ["carry1"] from prepare_carry.sh.
# v21 (session 35, never run): the kv tiles that need no mask found once per item, the K/Q releases
#   as predicated arrives; outputs bitwise v20's. Loop path per consumer warp and kv tile
#   (scripts/sm90-loop-path), unmasked / masked tile: d192 545 / 746 -> 519 / 719, d128 510 / 711
#   -> 494 / 694.
# v22 = v21 + the masked softmax by visibility bits (one bit test per element instead of two
#   compares, both kernels): masked tile d192 719 -> 642, d128 694 -> 617, unmasked unchanged
#   (520 / 495). Outputs bitwise v21's (the same -inf for the same elements).
# v22s = v22 + the shared base through a shuffle: 513 / 634 at d192, 499 / 621 at d128.
# Prediction (A/B, TFLOP/s against v20): v21 +0.5-1.5% at (192, 128) and +1-3% at (128, 128);
#   v22 a further +0.5-1.5% where masked tiles are a large share (1x999, 8x999+200, 100x999: about
#   one in 4.5 tiles), level on the long work (1x16384 one in ~64, non-causal only a sequence's
#   last tile); v22s within +-1% of v22.
set -u
source bench/device_env.sh
# Every sm90 test (both dims, both dtypes, split K, scale, graphs, batch invariance, determinism)
# and the MLA step: gpu-check's gpu-tests step on the carried binary, in 4 shards (tests.log,
# summary.txt). The sm80 kernel's share of v22 (the same softmax) is tested in s3.sh.
MLAKIT_BUILD_DIR=carry1/tests MLAKIT_SKIP_BUILD=1 GPU_CHECK_STEPS=gpu-tests GPU_TEST_SHARDS=4 \
  GPU_TEST_FILTER='*sm90*:Shapes/CudaMlaStep.*' timeout 240 scripts/gpu-check "$OUT" | grep -E "tests:|gpu-tests|overall"
el tests
# If v22's tests fail, v21's on the same filter say which change broke them.
if ! grep -q "gpu-tests: ok" $OUT/summary.txt 2>/dev/null; then
  timeout 120 carry1/tests_v21/mlakit_gpu_tests --gtest_filter='*sm90*' --gtest_brief=1 > $OUT/tests_v21.txt 2>&1
  tail -5 $OUT/tests_v21.txt; el tests_v21
fi
# Reference-checked runs (the bench's float64 check) of v22 on masked-heavy and long work.
for d in "" "--dqk 128 --dvo 128"; do
  timeout 60 carry1/ab/v22 --kernel sm90 $d --workload 1x999 --workload 8x999+200 --workload ctx_8x1024_vs_4096 \
    --iters 3 2>&1 | grep -E "cuda:0" >> $OUT/check_v22.txt
done
cat $OUT/check_v22.txt
el check
ab_rounds $OUT/ab_d192.txt 2 carry1/ab/v20 carry1/ab/v21 carry1/ab/v22 carry1/ab/v22s
el ab192
ab_rounds $OUT/ab_d128.txt 2 carry1/ab/v22s carry1/ab/v22 carry1/ab/v21 carry1/ab/v20 -- --kernel sm90 --all --iters 20 --warmup-ms 0 --no-check --dqk 128 --dvo 128
el ab128
