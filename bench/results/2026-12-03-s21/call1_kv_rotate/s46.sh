#!/bin/bash
# Device call 1 of session 21: the kv walk rotated (MLAKIT_SM90_KV_ROTATE, common/kv_walk.h).
# Hypothesis: the q tiles in flight together (same sequence and head) all ask L2 for the same K/V
# tile at nearly the same moment; 1x32768's loads cost 4x more than 1x16384's when halved
# (session 19's kv4 oracle: +16.6% against +3.4%), and its items run in lockstep (equal lengths).
# carry1/{base,r8,rfull}: mlakit-bench (+ mlakit_gpu_tests for r8, rfull), 90a builds of the tree
# in carry1/COMMIT with -DMLAKIT_SM90_KV_ROTATE=0 / 8 / 1048576.
#  1. r8's and rfull's sm90 prefill, split-K, scale (64k, 1000 sequences, batch invariance, 64-bit
#     offsets) and graph GPU tests;
#  2. A/B base / r8 / rfull, two rounds, round 1 reference-checked;
#  3. H=128 8192 (bimodal 600-740 in earlier sessions) alone in six processes of base, with the
#     SM clock sampled, to tell a per-process (allocation) mode from a thermal one.
# Run from the repository root with carry ["carry1"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=carry1
export MLAKIT_GIT_COMMIT=$(cat $C/COMMIT)
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_*:Kernels/CudaScale.*/sm90*:Shapes/CudaSplitK.*/sm90*:Kernels/CudaGraph*/sm90'
for v in r8 rfull; do
  timeout 150 $C/$v/mlakit_gpu_tests --gtest_filter="$F" > $OUT/gpu_$v.log 2>&1; echo "$v tests rc=$?"
  grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $OUT/gpu_$v.log | tail -8
  el tests $v
done
WL="--workload 1x32768 --workload ctx_8x1024_vs_4096 --workload 1x16384 --workload v3_128h_8192 --workload 100x999 --workload 8x999+200 --workload 1x999"
for r in 1 2; do
  for v in base r8 rfull; do
    chk=""; [ $r = 2 ] && chk="--no-check"
    echo "== round $r $v"
    timeout 100 $C/$v/mlakit-bench --kernel sm90 $WL --iters 20 $chk 2>&1 | grep -E "cuda:0/|FAIL|rror"
  done
done > $OUT/ab_bench.txt 2>&1
cat $OUT/ab_bench.txt; el bench
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 200 > $OUT/smi_h128.csv 2>&1 &
SMI=$!
for k in 1 2 3 4 5 6; do
  sleep 2
  echo "== h128 process $k $(date +%T.%N)"
  timeout 40 $C/base/mlakit-bench --kernel sm90 --workload v3_128h_8192 --iters 20 --no-check 2>&1 | grep -E "cuda:0/|rror"
done > $OUT/h128_modes.txt 2>&1
kill $SMI
cat $OUT/h128_modes.txt; el h128
