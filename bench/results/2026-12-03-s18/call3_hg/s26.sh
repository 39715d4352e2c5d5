#!/bin/bash
# Device call 3 of session 18: heads per group in the kSequenceRuns order (plan/run_order.h) for
# long causal sequences, where the oracle builds showed L2 residency worth +15% on H=128 8192.
# carry20/<v>/mlakit-bench: 90a Release builds of the commit in carry20/COMMIT with
#   base = defaults (head groups of up to 16)
#   hg<N> = -DMLAKIT_RUN_HEAD_GROUP_MAX=<N> in CMAKE_CXX_FLAGS and CMAKE_CUDA_FLAGS (N = 1, 2, 4, 8)
# Two rounds interleaved, --iters 20; the order changes no output bit (batch invariance), so
# --no-check. nvidia-smi samples SM clock and power every 100 ms meanwhile ($OUT/smi.csv).
# Run from the repository root with carry ["carry20"]: bash bench/results/2026-12-03-s18/call3_hg/s26.sh
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry20/COMMIT)
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 > $OUT/smi.csv 2>&1 & SMI=$!
WL="--workload v3_128h_8192 --workload v3_128h_4096 --workload 1x16384 --workload 100x999 --workload 8x999+200 --workload 1x999"
{ for r in 1 2; do for b in base hg1 hg2 hg4 hg8; do
  echo "== bench $b round $r $(date +%H:%M:%S.%N)"
  timeout 60 carry20/$b/mlakit-bench --kernel sm90 $WL --iters 20 --no-check 2>&1 | grep -E "cuda:0/|FAIL|rror"
done; done; } > $OUT/ab_bench.txt 2>&1
kill $SMI
el bench; cat $OUT/ab_bench.txt
