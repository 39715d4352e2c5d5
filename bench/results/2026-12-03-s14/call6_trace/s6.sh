#!/bin/bash
# Session 14, device call 7: block timelines with every phase stamped (v11 = late claim, built from
# 8b475e6 with -DMLAKIT_SM90_TRACE=1 -DMLAKIT_SM90_LATE_CLAIM=1): where an item's fixed ~2.4 us goes.
set -u
mkdir -p /tmp/tr
for w in 8x999 8x999+200 100x999 1x999 1x16384; do
  if [[ $w == 8x999 ]]; then a="--lens 8x999"; else a="--workload $w"; fi
  MLAKIT_SM90_TRACE_FILE=/tmp/tr/$w timeout 60 carry7/mlakit-bench --kernel sm90 $a --iters 5 --no-check 2>&1 | grep -E "cuda:0" 
  python3 bench/sm90_trace.py /tmp/tr/$w.d192_bf16.txt > /tmp/tr/$w.summary.txt 2>&1; head -4 /tmp/tr/$w.summary.txt
done
tar czf $OUT/trace.tgz -C /tmp tr
