#!/bin/bash
# Session 32 call 6: the 256-row bucket step (now the default) with DeepSeek-V3's 128 heads, against
# 1024, two alternated rounds (C++ seed, graph mode). carry ["carry1"] (mlakit-bench at the commit).
# Prediction: H=128's step is more GEMM-heavy per row than H=16's (n = 32768 columns), so the
# gain is at least H=16's: N=100 budget 8192 -1%, budget 2048 -3 to -5%.
set -u
for r in 1 2; do
  for s in 1024 256; do
    carry1/mlakit-bench seed --heads 128 --requests 100 --budgets 8192,2048 --modes graph --reps 3 --no-check \
      --bucket-step $s --json $OUT/h128_s${s}_r$r.json > $OUT/h128_s${s}_r$r.txt 2>&1
    echo "H=128 round $r step $s rc=$?: $(grep -E 'Total step time, (wall|device)' $OUT/h128_s${s}_r$r.txt | awk '{print $NF}' | tr '\n' ' ')ms (wall, device: budget 8192 then 2048)"
  done
done
