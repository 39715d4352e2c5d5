#!/bin/bash
# Session 28 call 6: compare_mla.py again (FA2 path, FlashInfer fa3, mlakit's graph paths) with the
# replay-only reading of the host share beside the profiler's. Call 5 read N=100 budget 8192 at
# 10.0% / 10.2% by the profiler (busy 53.5 of 59.5 ms wall) while the C++ step's host time was 0.7%.
# Prediction: replay-only device time ~58.5-59 ms (host share 1-2%): the profiled pass's kernels
# run shorter than the timed passes' (a cooler GPU between CUPTI's gaps), not host time.
set -u
source bench/device_env.sh binding flashinfer
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 300 python3 bench/compare_mla.py --cases 1:8192,100:8192,100:2048 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native \
  --json $OUT/compare_mla.json > $OUT/compare_mla.log 2>&1; echo "compare_mla rc=$?"
grep -E "host per step|MET|MISSED|: met|replay-only" $OUT/compare_mla.log | tail -30
gzip -f $OUT/compare_mla.json
el done
