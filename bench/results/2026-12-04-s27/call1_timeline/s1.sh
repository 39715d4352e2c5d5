#!/bin/bash
# Session 27, call 1: where the graph-replayed N=100 budget-8192 step's idle device time sits
# (compare_mla --timeline, torch.profiler), beside the C++ step's own device/wall split.
set -u
source bench/device_env.sh binding
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 200 python3 bench/compare_mla.py --cases 100:8192,100:2048 --paths mlakit_step_graph --reps 3 \
  --timeline $OUT/timeline.json --json $OUT/compare_mla.json > $OUT/compare_mla.log 2>&1; echo "compare_mla rc=$?"
grep -E "total .*wall|host share" $OUT/compare_mla.log | tail -8
python3 bench/timeline_kernels.py $OUT/timeline.json --top 14
el timeline
timeout 150 carry1/mb seed --requests 100 --budgets 8192 --modes graph --reps 3 --per-step --host-probe \
  --json $OUT/seed.json > $OUT/seed.log 2>&1; echo "seed rc=$?"
tail -45 $OUT/seed.log
gzip -f $OUT/timeline.json
el done
