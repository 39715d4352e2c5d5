#!/bin/bash
# Session 27, call 4: at c22b56e (sm90 SASS = c8b504b's but for the barrier ids; plan() reads
# int32 torch tables through the exchange table): the numbers of record beside the peers, plan()
# from C++, the MLA step beside the engines' paths, and plan()'s Python pieces after a GPU wait.
# Prediction: the kernel figures within the earlier passes' spread; MlaStep.plan with a torch
# table ~5-7 us cheaper after a wait (the .numpy() gone), so the N=1 Python host time a few us lower.
set -u
source bench/device_env.sh binding flashinfer
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 20 python3 bench/mla_plan_split_probe.py --iters 200 --wait sync 2>&1 | tee $OUT/plan_split_sync.txt
el probe
record $OUT/record
el record
timeout 30 carry1/mb-s27b --plan-only > $OUT/plan_only.txt 2>&1; grep -iE "batch|plan" $OUT/plan_only.txt | head -8
timeout 300 python3 bench/compare_mla.py --cases 1:8192,100:8192,100:2048 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native \
  --json $OUT/compare_mla.json > $OUT/compare_mla.log 2>&1; echo "compare_mla rc=$?"
grep -E "host per step|MET|MISSED|: met" $OUT/compare_mla.log | tail -24
gzip -f $OUT/compare_mla.json
el done
