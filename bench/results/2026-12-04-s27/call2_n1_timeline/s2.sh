#!/bin/bash
# Session 27, call 2: the N=1 step's idle device time, by where it sits (compare_mla --timeline),
# on both graph paths; and the C++ step at N=1 for its device/wall split.
set -u
source bench/device_env.sh binding
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
for r in 1 2; do
timeout 120 python3 bench/compare_mla.py --cases 1:8192 --paths mlakit_step_graph,mlakit_step_graph_native --reps 7 \
  --timeline $OUT/timeline_r$r.json --json $OUT/compare_mla_r$r.json > $OUT/compare_mla_r$r.log 2>&1; echo "compare_mla rc=$?"
grep -E "total .*wall|host share|host per step" $OUT/compare_mla_r$r.log | tail -8
done
el timeline
timeout 60 carry1/mb seed --requests 1 --budgets 8192 --modes graph --reps 7 --host-probe \
  --json $OUT/seed.json > $OUT/seed.log 2>&1; echo "seed rc=$?"
grep -E "Total step|Host share of total|plan|probe|launch|us" $OUT/seed.log | head -40
gzip -f $OUT/timeline_r*.json
el done
