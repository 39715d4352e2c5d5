#!/bin/bash
# Session 28 call 7: the small-sequence split (--kv-split on) against the default (auto: tail rule
# only) on v19, for the N=1 MLA step's attention (1x999 at 16 heads: 128 items on 132 SMs, the
# longest 8 kv tiles). Measured slower at v9 (0.032 vs 0.023 ms); not re-measured since.
set -u
source bench/device_env.sh
for r in 1 2 3; do
  for m in auto on; do
    for w in 1x999 ctx_799_vs_200 8x999+200; do
      timeout 60 carry1/mb28 --kernel sm90 --workload $w --kv-split $m --iters 30 --no-check 2>&1 | grep "cuda:0/" | sed "s/^/$m r$r /"
    done
  done
done | tee $OUT/split.txt
