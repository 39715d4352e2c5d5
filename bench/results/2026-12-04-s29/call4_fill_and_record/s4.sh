#!/bin/bash
# Session 29 call 4: (1) the new GEMM test (tuning values); (2) GEMM tuning on random values
# (carry1/mb29 = de3d941) against the constant 0x3c3c (carry1/mb28h = e45e606, same GEMM code
# otherwise): mlakit-bench seed, graph mode, alternated rounds, picks logged in round 1;
# (3) the record: compare.py beside the peers (scripts/gpu-check's flashinfer + compare steps)
# and compare_mla.py with the timed passes now taken in turns across paths (3df8732).
# Predictions: (1) passes; (2) picks change in a few classes, step within +-1%; (3) kernel table
# as session 27's within the spread; MLA step ~60 ms at N=100 budget 8192.
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader
timeout 120 carry1/tests29 --gtest_filter='*CudaMlaGemm*' > $OUT/tests_gemm.log 2>&1; echo "gemm tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $OUT/tests_gemm.log | head
el tests
for r in 1 2 3; do
  for b in mb28h mb29; do
    log=""; [ $r = 1 ] && log=1
    MLAKIT_GEMM_TUNE_LOG=$log timeout 90 carry1/$b seed --requests 1,100 --budgets 8192,2048 --modes graph --reps 3 --no-check > $OUT/seed_${b}_r$r.txt 2>&1
    echo "r$r $b: $(grep -E 'Total step time, wall|MlaStep created' $OUT/seed_${b}_r$r.txt | awk '{print $NF}' | tr '\n' ' ')"
  done
done
el seed_ab
for r in 1 2; do
  for b in mb28h mb29; do
    timeout 90 carry1/$b seed --heads 128 --requests 100 --budgets 8192 --modes graph --reps 3 --no-check > $OUT/seed128_${b}_r$r.txt 2>&1
    echo "H128 r$r $b: $(grep -E 'Total step time, wall|MlaStep created' $OUT/seed128_${b}_r$r.txt | awk '{print $NF}' | tr '\n' ' ')"
  done
done
el seed128_ab
tar czf $OUT/seed_logs.tgz -C $OUT $(cd $OUT && ls seed*_r*.txt) && rm -f $OUT/seed*_r*.txt
rm -rf build-py
source bench/device_env.sh binding flashinfer
record $OUT/record
el record
timeout 240 python3 bench/compare_mla.py --cases 1:8192,100:8192,100:2048 \
  --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native \
  --json $OUT/compare_mla.json > $OUT/compare_mla.log 2>&1; echo "compare_mla rc=$?"
grep -E "MET|MISSED|: met|: missed|total .* ms wall" $OUT/compare_mla.log | tail -24
gzip -f $OUT/compare_mla.json
tar czf $OUT/record.tgz -C $OUT record && rm -rf $OUT/record
el done
