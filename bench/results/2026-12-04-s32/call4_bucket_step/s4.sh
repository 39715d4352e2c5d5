#!/bin/bash
# Session 32 call 4: CUDA-graph buckets in 256-row steps above 1024 rows instead of 1024
# (mlakit-bench seed / compare_mla.py --bucket-step). The padding up to a bucket is up-projection
# GEMM and gather work on rows nothing reads: at N=100 the rows computed fall from 109163 to
# 105794 at budget 8192 (-3.1%) and from 145049 to 126136 at budget 2048 (-13.0%).
# carry ["carry1", ".peers"] (carry1: mlakit-bench at cf79a58).
# Prediction (GEMM + gather ~35-40% of the step): C++ seed graph mode, N=100, budget 8192
# -1 to -1.5% (~57.8 -> ~57.1 ms), budget 2048 -5 to -6% (~84 -> ~79.5 ms); compare_mla.py
# likewise for mlakit's graph paths; the peers' paths unchanged (they run eagerly).
set -u
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT}
source bench/device_env.sh
for r in 1 2; do
  for s in 1024 256; do
    carry1/mlakit-bench seed --requests 100 --budgets 8192,2048 --modes graph --reps 3 --no-check \
      --bucket-step $s --json $OUT/seed_s${s}_r$r.json > $OUT/seed_s${s}_r$r.txt 2>&1
    echo "round $r step $s rc=$?: $(grep -E 'Total step time, wall' $OUT/seed_s${s}_r$r.txt | awk '{print $NF}' | tr '\n' ' ')ms (budgets 8192, 2048); graphs: $(grep -E 'CUDA graphs' $OUT/seed_s${s}_r$r.txt | sed 's/.*: *//' | tr '\n' ' ')"
  done
done
el seed_ab
rm -rf build-py
source bench/device_env.sh binding flashinfer
el setup
mla_record $OUT/mla256 --cases 1:8192,100:8192,100:2048 --bucket-step 256 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native
el compare_mla_256
mla_record $OUT/mla1024 --cases 100:8192,100:2048 --bucket-step 1024 --paths mlakit_step_graph,mlakit_step_graph_native
el compare_mla_1024
