#!/bin/bash
# Session 35 prepared call 1 (not run in session 35: no device was lent): the v21 candidate
# (branch s35-v21-full-tiles) tested and timed against v20, with one variant (v21s). carry ["carry1"] from prepare_carry.sh.
# v21 only moves work: the kv tiles that need no mask are found once per item instead of the rule
# evaluated on every tile, and the K/Q releases are predicated arrives instead of a divergent
# branch, so ~17 uniform instructions and one branch leave the path between each S's completion
# and its softmax (SASS, the kv loop's common path per warp and tile: d128 510 -> 494
# instructions, d192 545 -> 519, branches 7 -> 5).
# Its outputs must be bitwise v20's. v21s (v21 + v21s_sbase_broadcast.patch) also keeps the shared
# base out of the loop: loop path d128 494 -> 498, d192 519 -> 512 instructions, no S2UR in it.
# Prediction: +1-3% at (128, 128) on every workload (the tile is 8 k-steps of S, so the path
# between S and the softmax is a larger share), +0.5-1.5% at (192, 128); level is possible, as
# v17 was level on v16b and +1.5-3.5% on v19.
set -u
source bench/device_env.sh
# Every sm90 test (both dims, both dtypes, split K, scale, graphs, batch invariance, determinism)
# and the MLA step, which runs the (192, 128) split-K kernel: gpu-check's gpu-tests step on the
# carried binary, in 4 shards (tests.log, summary.txt).
MLAKIT_BUILD_DIR=carry1/tests MLAKIT_SKIP_BUILD=1 GPU_CHECK_STEPS=gpu-tests GPU_TEST_SHARDS=4 \
  GPU_TEST_FILTER='*sm90*:Shapes/CudaMlaStep.*' timeout 240 scripts/gpu-check "$OUT" | grep -E "tests:|gpu-tests|overall"
el tests
for d in "" "--dqk 128 --dvo 128"; do
  timeout 60 carry1/ab/v21 --kernel sm90 $d --workload 8x999+200 --workload ctx_8x1024_vs_4096 --iters 3 2>&1 \
    | grep -E "cuda:0" >> $OUT/check_v21.txt
done
cat $OUT/check_v21.txt
el check
ab_rounds $OUT/ab_d128.txt 2 carry1/ab/v20 carry1/ab/v21 carry1/ab/v21s -- --kernel sm90 --all --iters 20 --warmup-ms 0 --no-check --dqk 128 --dvo 128
el ab128
ab_rounds $OUT/ab_d192.txt 2 carry1/ab/v21s carry1/ab/v21 carry1/ab/v20
el ab192
