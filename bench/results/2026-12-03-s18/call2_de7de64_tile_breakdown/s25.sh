#!/bin/bash
# Device call 2 of session 18. carry19/: tr<v> = trace builds of the commit in carry19/COMMIT
# (-DMLAKIT_SM90_TRACE=1, with U lines: per tile S issue / S landed / softmax done) for
# base (v13), nosm (-DMLAKIT_SM90_EXP_NO_SOFTMAX=1) and kv2 (-DMLAKIT_SM90_EXP_KV=2); and the
# non-trace oracle builds of call 1 (s24.sh, commit 8620311: base kv1 kv2 nosm kv2nosm) for their
# TFLOP/s, whose grep missed in call 1. --no-check (the oracles are wrong by design).
# Run from the repository root with carry ["carry19"]: bash bench/results/2026-12-03-s18/s25.sh
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry19/COMMIT)
mkdir -p /tmp/tr
for b in base nosm kv2; do
  for w in 1x16384 100x999; do
    MLAKIT_SM90_TRACE_FILE=/tmp/tr/${b}_$w timeout 60 carry19/tr$b/mlakit-bench --kernel sm90 --workload $w --iters 5 --no-check \
      2>&1 | grep -E "cuda:0/" | sed "s/^/tr$b /"
  done
done > /tmp/tr/bench.txt 2>&1
el traces; cat /tmp/tr/bench.txt
for f in /tmp/tr/*.d192_bf16.txt; do python3 bench/sm90_trace.py "$f"; done > /tmp/tr/summary.txt 2>&1
grep -E "^/tmp|fit:|inside a kv tile|consumer warpgroups|^ +[0-7] +[0-9]+ " /tmp/tr/summary.txt | head -100
tar czf $OUT/traces.tgz -C /tmp tr
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 100x999 --workload 8x999+200"
for b in base kv1 kv2 nosm kv2nosm; do
  echo "== bench $b"
  timeout 60 carry19/$b/mlakit-bench --kernel sm90 $WL --iters 20 --no-check 2>&1 | grep -E "cuda:0/|FAIL|rror"
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader
done > $OUT/ab_bench.txt 2>&1
cat $OUT/ab_bench.txt; el done
