#!/bin/bash
# Session 29 call 2: why compare_mla.py's StreamGraph path (mlakit_step_graph_native) read 3-4 ms
# slower than torch's graph path at N=100 budget 8192 in session 28's calls 6 and 8 (wall 63.4 /
# 64.1 against 60.1 / 60.0 ms; replay-only 61.2 / 61.0 against 60.1 / 59.5), level in call 5 and
# at budget 2048. Two candidates: (a) upload_in_run (the native path's plan is uploaded by the
# graph's first node, the capacity-sized plan block, where the torch path's plan() copies the used
# prefix); (b) the order: the native path runs right after the torch path's passes (a hotter GPU
# under the same power cap runs a lower clock).
# (a) C++ only: mlakit-bench seed, graph mode, with and without --upload-in-run, 3 alternated rounds.
# (b) compare_mla.py with only mlakit's graph paths, in both orders.
# Prediction: if (a), uir is slower in C++ by ~0.1-0.25 ms per step; if (b), whichever path runs
# second is the slower one in both orders.
set -u
source bench/device_env.sh
B=carry1/mb28h
for r in 1 2 3; do
  for m in plain uir; do
    extra=""; [ $m = uir ] && extra="--upload-in-run"
    timeout 60 $B seed --requests 100 --budgets 8192 --modes graph --reps 5 --no-check $extra > $OUT/seed_${m}_r$r.txt 2>&1
    echo "r$r $m: $(grep -E 'Total step time|Host share of total|Median step host' $OUT/seed_${m}_r$r.txt | tr '\n' ' ')"
  done
done
el seed_ab
source bench/device_env.sh binding
el binding
for p in mlakit_step_graph_native,mlakit_step_graph mlakit_step_graph,mlakit_step_graph_native; do
  order=$(echo $p | sed 's/mlakit_step_//g')
  timeout 150 python3 bench/compare_mla.py --cases 100:8192 --paths $p --no-profile > $OUT/cmla_${order/,/_then_}.log 2>&1
  echo "order $p rc=$?"; grep -E "total .* ms wall|replay-only" $OUT/cmla_${order/,/_then_}.log | head -6
  el "order $order"
done
