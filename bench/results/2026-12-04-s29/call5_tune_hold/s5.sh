#!/bin/bash
# Session 29 call 5: GEMM tuning with each batch of timed calls held behind a 150 us kernel
# (carry1/mb30 = the commit in carry1/COMMIT) against random values without the hold (carry1/mb29,
# de3d941). Picks logged (MLAKIT_GEMM_TUNE_LOG=1) in every round, seed step in graph mode.
# Prediction: the small classes' candidate times tighten (m 2048: all within ~15-19 us instead of
# 15.8 against 21-23), picks repeat across rounds; step level or up to -1% at budget 2048
# (more of its steps use the small classes).
set -u
source bench/device_env.sh
for r in 1 2 3; do
  for b in mb29 mb30; do
    MLAKIT_GEMM_TUNE_LOG=1 timeout 90 carry1/$b seed --requests 1,100 --budgets 8192,2048 --modes graph --reps 3 --no-check > $OUT/seed_${b}_r$r.txt 2>&1
    echo "r$r $b: $(grep -E 'Total step time, wall|MlaStep created' $OUT/seed_${b}_r$r.txt | awk '{print $NF}' | tr '\n' ' ')"
  done
done
el seed_ab
for b in mb29 mb30; do
  echo "$b picks per round (class -> pick):"
  for r in 1 2 3; do
    echo "  r$r $(grep -h 'gemm tune' $OUT/seed_${b}_r$r.txt | head -12 | sed -E 's/.*m class ([0-9]+).*-> ([0-9]+)/\1:\2/' | tr '\n' ' ')"
  done
done
tar czf $OUT/seed_logs.tgz -C $OUT $(cd $OUT && ls seed*_r*.txt) && rm -f $OUT/seed*_r*.txt
el done
