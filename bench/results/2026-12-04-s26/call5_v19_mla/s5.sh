#!/bin/bash
# Session 26, call 5: the seed's MLA step at 14e205b (v19) beside the FA2 and FlashInfer paths.
set -u
source bench/device_env.sh binding flashinfer
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 420 python3 bench/compare_mla.py --cases 1:8192,100:8192,100:2048 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native \
  --json $OUT/compare_mla.json > $OUT/compare_mla.log 2>&1; echo "compare_mla rc=$?"
grep -E "host share|MET|MISSED|total .*wall|speedup|×" $OUT/compare_mla.log | tail -40
gzip -f $OUT/compare_mla.json
el done
