#!/bin/bash
# Session 32 call 8: compare_mla.py beside the peers with every timed pass started under the power
# cap (--heat-ms 200: bf16 products before each pass), the conservative reading of issue #7's
# ratios (call 7: mlakit's N=100 step ~5% faster from a rested GPU, which is how it often starts
# in the default order, after a host-bound peer's pass). carry [".peers"].
# Prediction: mlakit N=100 budget 8192 ~57.5-58 ms, budget 2048 ~87-88, N=1 ~1.0-1.05 ms; the
# peers' walls about as host-bound as before (their GPU parts a little slower).
set -u
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT}
rm -rf build-py
source bench/device_env.sh binding flashinfer
el setup
MLA_RECORD_TIMEOUT=420 mla_record $OUT --cases 1:8192,100:8192,100:2048 --heat-ms 200 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native
el compare_mla_heated
