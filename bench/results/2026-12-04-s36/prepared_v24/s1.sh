#!/bin/bash
# Session 36 prepared call 1: the v24 candidate (branch s36-v22-mask-bits) tested and
# reference-checked, and the (192, 128) A/B of v20 (main) and the four steps to v24.
# carry ["carry1"] from prepare_carry.sh. Each step on the one before (SASS, scripts/sm90-loop-path:
# per consumer warp and kv tile, unmasked / masked, at (192, 128); (128, 128) in s3.sh):
#   v20 (main) 545 / 746
#   v21 519 / 719: the no-mask tiles found once per item, the K/Q releases as predicated arrives
#   v22 520 / 642: the masked softmax by visibility bits (both kernels)
#   v23 507 / 629: the wgmma descriptors built once per kernel (no S2UR, no per-k-step mask)
#   v24 507 / 629: an item's first P V overwrites O (32 fewer instructions per warp and item)
# Every step keeps the arithmetic: outputs must be bitwise v20's.
# Prediction (TFLOP/s against v20, this call's two rounds): v21 +0.5-1.5%; v22 a further
#   +0.5-1.5% on 1x999, 8x999+200 and 100x999 (masked tiles about 1 in 4.5 there), level on the
#   long work; v23 +0.5-2% everywhere (2.5% fewer instructions per tile); v24 +0.3-1% on the
#   999-token batches (~1% fewer instructions per item), level on the long work. v24 against v20:
#   +2-5% on the 999-token batches (100x999 past 500), +1-3% on the long work.
set -u
source bench/device_env.sh
# Every sm90 test (both dims, both dtypes, split K, scale, graphs, batch invariance, determinism)
# and the MLA step: gpu-check's gpu-tests step on v24's binary, in 4 shards (tests.log,
# summary.txt). The sm80 kernel's share of v22 (the same softmax) is tested in s3.sh.
MLAKIT_BUILD_DIR=carry1/tests MLAKIT_SKIP_BUILD=1 GPU_CHECK_STEPS=gpu-tests GPU_TEST_SHARDS=4 \
  GPU_TEST_FILTER='*sm90*:Shapes/CudaMlaStep.*' timeout 240 scripts/gpu-check "$OUT" | grep -E "tests:|gpu-tests|overall"
el tests
# If v24's tests fail, v22's and v21's on the same filter say which change broke them.
if ! grep -q "gpu-tests: ok" $OUT/summary.txt 2>/dev/null; then
  for v in v22 v21; do
    timeout 100 carry1/tests_$v/mlakit_gpu_tests --gtest_filter='*sm90*' --gtest_brief=1 > $OUT/tests_$v.txt 2>&1
    echo "$v rc=$?"; tail -4 $OUT/tests_$v.txt; el tests_$v
  done
fi
# Reference-checked runs (the bench's float64 check) of v24 on masked-heavy and long work.
for d in "" "--dqk 128 --dvo 128"; do
  timeout 60 carry1/ab/v24 --kernel sm90 $d --workload 1x999 --workload 8x999+200 --workload ctx_8x1024_vs_4096 \
    --iters 3 2>&1 | grep -E "cuda:0" >> $OUT/check_v24.txt
done
cat $OUT/check_v24.txt
el check
ab_rounds $OUT/ab_d192.txt 2 carry1/ab/v20 carry1/ab/v21 carry1/ab/v22 carry1/ab/v23 carry1/ab/v24
el ab192
