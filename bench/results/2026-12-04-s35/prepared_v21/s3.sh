#!/bin/bash
# Session 35 prepared call 3 (not run): ncu of v20 and v21, clocks locked at base, one launch each
# of 1x16384 at (128, 128) and of 100x999 at (192, 128) (the launch after the first, so neither is
# a cold one). Session 34 counted, at (128, 128), 108 M uniform-datapath instructions and 15.8 M
# branches for v19 against FlashInfer fa3's 43 M and 5.3 M. carry ["carry1"] from prepare_carry.sh.
# Prediction: v21 executes ~3% (d128) and ~5% (d192) fewer instructions per kv tile than v20 (SASS
# loop path per warp and tile 510 -> 494 and 545 -> 519), ~15 and ~25 fewer uniform ones and 2
# fewer branches per warp and tile,
# and its tensor pipe is busier by about as much as its cycles fall.
set -u
source bench/device_env.sh
M=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.sum,smsp__inst_executed_op_branch.sum,sm__inst_executed.sum,sm__cycles_elapsed.max
for b in v20 v21; do
  for w in "--dqk 128 --dvo 128 --workload 1x16384" "--workload 100x999"; do
    timeout 120 ncu -f --clock-control base -k regex:prefill_sm90_kernel -s 1 -c 1 --metrics $M \
      carry1/ab/$b --kernel sm90 $w --iters 2 --warmup-ms 0 --no-check > /tmp/n.txt 2>&1
    echo "== $b $w rc=$?" | tee -a $OUT/ncu.txt
    grep -E "sm__|smsp__" /tmp/n.txt | tee -a $OUT/ncu.txt
  done
  el $b
done
