#!/bin/bash
# Device call of session 18: where the kv tile's ~2990 SM cycles go (2560 are tensor work).
# carry18/<v>/mlakit-bench: 90a Release builds of the commit in carry18/COMMIT with
#   base    = defaults (v13)
#   kv1     = -DMLAKIT_SM90_EXP_KV=1   every K/V tile of an item read from its first tile (L2-resident)
#   kv2     = -DMLAKIT_SM90_EXP_KV=2   no K/V loads at all (stale shared tiles)
#   nosm    = -DMLAKIT_SM90_EXP_NO_SOFTMAX=1   P = raw S (no softmax)
#   kv2nosm = both                     the matrix pipe and the loop alone
#   tr<v>   = the same with -DMLAKIT_SM90_TRACE=1 (per-tile periods in SM cycles: clock-independent)
# Measurement builds (wrong results by design): --no-check everywhere.
# Run from the repository root with carry ["carry18"]: bash bench/results/2026-12-03-s18/s24.sh
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry18/COMMIT)
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 100x999 --workload 8x999+200"
{ for r in 1 2; do for b in base kv1 kv2 nosm kv2nosm; do
  echo "== bench $b round $r"
  timeout 60 carry18/$b/mlakit-bench --kernel sm90 $WL --iters 20 --no-check 2>&1 | grep -E "cuda:0 |FAIL|rror"
done; done; } > $OUT/ab_bench.txt 2>&1
el bench; cat $OUT/ab_bench.txt
mkdir -p /tmp/tr
for b in base kv1 kv2 nosm kv2nosm; do
  for w in 1x16384 100x999 v3_128h_8192; do
    MLAKIT_SM90_TRACE_FILE=/tmp/tr/${b}_$w timeout 60 carry18/tr$b/mlakit-bench --kernel sm90 --workload $w --iters 5 --no-check \
      2>&1 | grep -E "cuda:0 " | sed "s/^/tr$b /"
  done
done > /tmp/tr/bench.txt 2>&1
el traces; cat /tmp/tr/bench.txt
for f in /tmp/tr/*.d192_bf16.txt; do python3 bench/sm90_trace.py "$f"; done > /tmp/tr/summary.txt 2>&1
grep -E "^/tmp|fit:|consumer warpgroups|^ +[0-7] +[0-9]+ " /tmp/tr/summary.txt | head -120
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
tar czf $OUT/traces.tgz -C /tmp tr; el done
