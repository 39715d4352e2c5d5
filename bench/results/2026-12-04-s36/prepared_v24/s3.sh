#!/bin/bash
# Session 36 prepared call 3: v22's change to the softmax both kernels share, on the sm80 kernel
# (its prefill tests at (192, 128) bf16 and (64, 64) fp16, 26 tests in 4 shards); the (128, 128)
# A/B (loop path per warp and tile, unmasked / masked: v20 510 / 711, v21 494 / 694, v22 495 /
# 617, v24 487 / 609); ncu of v20, v22 and v24 with clocks locked at base, the launch after the
# first, of 100x999 and 8x999+200 at (192, 128). carry ["carry1"] from prepare_carry.sh.
# Prediction: at (128, 128) v24 +2-5% over v20 on every workload (v21 +1-3% of it); instructions
# per launch v20 -> v22 -6 to -8% and v22 -> v24 a further -3% on both workloads; uniform-datapath
# instructions -20% and -13%; cycles fall by less than the instructions.
set -u
source bench/device_env.sh
MLAKIT_BUILD_DIR=carry1/tests MLAKIT_SKIP_BUILD=1 GPU_CHECK_STEPS=gpu-tests GPU_TEST_SHARDS=4 \
  GPU_TEST_FILTER='KernelsHeadDimsAndTypes/*sm80_d192x128_bf16:KernelsHeadDimsAndTypes/*sm80_d64x64_fp16' \
  timeout 200 scripts/gpu-check "$OUT" | grep -E "tests:|gpu-tests|overall"
el sm80_tests
ab_rounds $OUT/ab_d128.txt 2 carry1/ab/v24 carry1/ab/v22 carry1/ab/v21 carry1/ab/v20 -- --kernel sm90 --all --iters 20 --warmup-ms 0 --no-check --dqk 128 --dvo 128
el ab128
M=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.sum,smsp__inst_executed_op_branch.sum,sm__inst_executed.sum,sm__cycles_elapsed.max
for b in v20 v22 v24; do
  for w in 100x999 8x999+200; do
    timeout 90 ncu -f --clock-control base -k regex:prefill_sm90_kernel -s 1 -c 1 --metrics $M \
      carry1/ab/$b --kernel sm90 --workload $w --iters 2 --warmup-ms 0 --no-check > /tmp/n.txt 2>&1
    echo "== $b $w rc=$?" | tee -a $OUT/ncu.txt
    grep -E "sm__|smsp__" /tmp/n.txt | tee -a $OUT/ncu.txt
  done
  el $b
done
