#!/bin/bash
# Session 28 call 5: at the tuned-GEMM commit (carry1/COMMIT): the MLA GPU tests, memcheck and
# synccheck over the tuned GEMM and the MLA step, the C++ seed step, and compare_mla.py beside the
# engines' paths (FA2 path, FlashInfer fa3, mlakit's graph paths). Prediction: N=100 budget 8192
# ~2.5% below session 27's 61.30 ms (the GEMM ~30% of the step, ~14% faster at m 8192/8993).
set -u
source bench/device_env.sh binding flashinfer
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 200 carry1/tests28 --gtest_filter='*Mla*' > $OUT/tests_mla.log 2>&1; echo "mla tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|tests ran" $OUT/tests_mla.log
el tests
F='DTypes/CudaMlaGemm.TunedGemmMatchesFirstChoiceAndReference/bf16:Shapes/CudaMlaStep.*/sm90_h16_bs16_*:Upload/CudaMlaGraph.CaptureLayerLoopThenReplanAndReplay/*'
for tool in memcheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 carry1/tests28 --gtest_filter="$F" > $OUT/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E '^\[  PASSED|ERROR SUMMARY' $OUT/san_$tool.log | tr '\n' ' ')"
done
el sanitizers
timeout 120 carry1/mb28 seed --requests 1,100 --budgets 8192,2048 --modes graph --reps 3 --json $OUT/seed.json > $OUT/seed.log 2>&1; echo "seed rc=$?"
grep -E "^(Requests|Token budget|MlaStep created|Total step time|Host share of total)|check:" $OUT/seed.log
el seed
timeout 300 python3 bench/compare_mla.py --cases 1:8192,100:8192,100:2048 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native \
  --json $OUT/compare_mla.json > $OUT/compare_mla.log 2>&1; echo "compare_mla rc=$?"
grep -E "host per step|MET|MISSED|: met" $OUT/compare_mla.log | tail -24
gzip -f $OUT/compare_mla.json
el done
