#!/bin/bash
# Session 36 prepared call 3: v22's change to the softmax both kernels share, on the sm80 kernel
# (its prefill tests at (192, 128) bf16 and (64, 64) fp16, 26 tests in 4 shards), then ncu of
# v20, v21 and v22 with clocks locked at base, one launch each (the launch after the first) of
# 1x16384 at (128, 128), and 100x999 and 8x999+200 at (192, 128). carry ["carry1"].
# Prediction: instructions per launch v20 -> v21 -3% (d128) / -5% (d192), v21 -> v22 a further
#   -2 to -3% on 100x999 and 8x999+200 (masked tiles ~1 in 4.5, 77 fewer instructions per warp
#   each) and under -0.5% on 1x16384; uniform-datapath and branch counts fall v20 -> v21 and stay
#   v21 -> v22; cycles fall by at most as much as the instructions.
set -u
source bench/device_env.sh
MLAKIT_BUILD_DIR=carry1/tests MLAKIT_SKIP_BUILD=1 GPU_CHECK_STEPS=gpu-tests GPU_TEST_SHARDS=4 \
  GPU_TEST_FILTER='KernelsHeadDimsAndTypes/*sm80_d192x128_bf16:KernelsHeadDimsAndTypes/*sm80_d64x64_fp16' \
  timeout 200 scripts/gpu-check "$OUT" | grep -E "tests:|gpu-tests|overall"
el sm80_tests
M=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.sum,smsp__inst_executed_op_branch.sum,sm__inst_executed.sum,sm__cycles_elapsed.max
for b in v20 v21 v22; do
  for w in "--dqk 128 --dvo 128 --workload 1x16384" "--workload 100x999" "--workload 8x999+200"; do
    timeout 120 ncu -f --clock-control base -k regex:prefill_sm90_kernel -s 1 -c 1 --metrics $M \
      carry1/ab/$b --kernel sm90 $w --iters 2 --warmup-ms 0 --no-check > /tmp/n.txt 2>&1
    echo "== $b $w rc=$?" | tee -a $OUT/ncu.txt
    grep -E "sm__|smsp__" /tmp/n.txt | tee -a $OUT/ncu.txt
  done
  el $b
done
