#!/bin/bash
# Prepared for the next device call (not run: this session's device time was spent). Block and
# per-tile timelines of v13 (dephased consumer warpgroups) against the same kernel without the
# dephase, to see whether the two consumer warpgroups run in lockstep inside an item or take turns
# (bench/sm90_trace.py's "the two consumer warpgroups per kv tile" table), and how the item phases
# moved. carry17/ (git-ignored): v13/ and dp0/ each with a stripped mlakit-bench built with
#   -DCMAKE_CUDA_FLAGS="-DMLAKIT_SM90_TRACE=1"                              (v13)
#   -DCMAKE_CUDA_FLAGS="-DMLAKIT_SM90_TRACE=1 -DMLAKIT_SM90_DEPHASE_NS=0"   (dp0)
# (90a, Release, tools on; trace builds spill 4 bytes, as shipped builds do). Run from the repository
# root with carry ["carry17"]: bash bench/results/2026-12-03-s17/prepared_not_run/s23.sh
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
mkdir -p /tmp/tr
for v in dp0 v13; do
  for w in "--lens 8x999" "--workload 100x999" "--workload 1x16384" "--lens 2x999"; do
    tag=$(echo "$w" | awk '{print $2}')
    MLAKIT_SM90_TRACE_FILE=/tmp/tr/${v}_$tag timeout 60 carry17/$v/mlakit-bench --kernel sm90 $w --iters 5 --no-check \
      2>&1 | grep -E "cuda:0" | sed "s/^/$v /"
  done
done > /tmp/tr/bench.txt
el traces; cat /tmp/tr/bench.txt
for f in /tmp/tr/*.txt; do [[ $f == */bench.txt ]] && continue; python3 bench/sm90_trace.py "$f"; done > /tmp/tr/summary.txt 2>&1
grep -E "^/tmp|fit:|consumer warpgroups|^ +[0-7] +[0-9]+ " /tmp/tr/summary.txt | head -80
tar czf $OUT/traces.tgz -C /tmp tr; el done
