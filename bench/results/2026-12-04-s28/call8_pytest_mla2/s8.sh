#!/bin/bash
# Session 28 call 8: the Python suite with the CUDA binding (every MlaStep it creates now tunes the
# GEMM), then a second compare_mla.py pass on this host (the peers' host-bound paths move with the
# host: call 5 read FlashInfer at N=1 ... N=100 163.8 ms, call 6 131.3 ms).
set -u
source bench/device_env.sh binding flashinfer
MLAKIT_BUILD_DIR=build-py timeout 300 python3 -m pytest -q -rs python/tests > $OUT/pytest.log 2>&1; echo "pytest rc=$?"
tail -4 $OUT/pytest.log
el pytest
timeout 300 python3 bench/compare_mla.py --cases 1:8192,100:8192,100:2048 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native \
  --json $OUT/compare_mla.json > $OUT/compare_mla.log 2>&1; echo "compare_mla rc=$?"
grep -E "host per step|MET|MISSED|: met|total .* ms wall" $OUT/compare_mla.log | tail -30
gzip -f $OUT/compare_mla.json
el done
