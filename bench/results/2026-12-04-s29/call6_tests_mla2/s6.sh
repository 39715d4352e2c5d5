#!/bin/bash
# Session 29 call 6: HEAD's MLA and GEMM GPU tests (the tuning now held and on random values),
# then a second compare_mla.py pass (timed passes in turns across paths) at HEAD.
set -u
source bench/device_env.sh
timeout 200 carry1/tests30 --gtest_filter='*MlaGemm*:*Mla*' > $OUT/tests_mla.log 2>&1; echo "mla/gemm tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $OUT/tests_mla.log | head
el tests
rm -rf build-py
source bench/device_env.sh binding flashinfer
timeout 240 python3 bench/compare_mla.py --cases 1:8192,100:8192,100:2048 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native \
  --json $OUT/compare_mla.json > $OUT/compare_mla.log 2>&1; echo "compare_mla rc=$?"
grep -E "MET|MISSED|: met|: missed|total .* ms wall" $OUT/compare_mla.log | tail -24
gzip -f $OUT/compare_mla.json
el done
