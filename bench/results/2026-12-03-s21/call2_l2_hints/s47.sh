#!/bin/bash
# Device call 2 of session 21: L2 eviction priorities on the sm90 kernel's TMA transfers
# (MLAKIT_SM90_L2_Q / _KV / _O, ptx_sm90.cuh's l2_policy). Q is read once and O written once per
# item, while every K/V tile is read again by the other q tiles of its (sequence, head); H=128
# 1x8192 is bimodal per process (call 1: 628-634 or 711-712 TFLOP/s, same binary), and session
# 18's L2-resident oracle gained it 15%. carry2/{base,qkvo,qkv,qo}: mlakit-bench + mlakit_gpu_tests,
# 90a builds of carry2/COMMIT's tree: base = no hints (v15), qkvo = Q evict_first, K/V evict_last,
# O evict_first; qkv = without O's; qo = Q and O evict_first, K/V no hint.
#  1. qkvo's sm90 prefill, scale, split-K and graph GPU tests;
#  2. A/B of the four, two rounds, round 1 reference-checked;
#  3. H=128 8192 alone in 4 processes per variant (its mode is per process);
#  4. ncu (clocks not locked) of one H=128 8192 launch in 3 processes of base and of qkvo: DRAM
#     bytes, L2 hit rate, far-L2 (fabric) sectors, SM clock.
# Run from the repository root with carry ["carry2"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=carry2
export MLAKIT_GIT_COMMIT=$(cat $C/COMMIT)
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_*:Kernels/CudaScale.*/sm90*:Shapes/CudaSplitK.*/sm90*:Kernels/CudaGraph*/sm90'
timeout 100 $C/qkvo/mlakit_gpu_tests --gtest_filter="$F" > $OUT/gpu_qkvo.log 2>&1; echo "qkvo tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $OUT/gpu_qkvo.log | tail -8
el tests
V="base qkvo qkv qo"
WL="--workload 1x32768 --workload ctx_8x1024_vs_4096 --workload 1x16384 --workload 100x999 --workload 8x999+200 --workload 1x999 --workload v3_128h_8192"
for r in 1 2; do
  for v in $V; do
    chk=""; [ $r = 2 ] && chk="--no-check"
    echo "== round $r $v"
    timeout 60 $C/$v/mlakit-bench --kernel sm90 $WL --iters 20 $chk 2>&1 | grep -E "cuda:0/|FAIL|rror"
  done
done > $OUT/ab_bench.txt 2>&1
cat $OUT/ab_bench.txt; el bench
for k in 1 2 3 4; do
  for v in $V; do
    echo "== h128 $v process $k"
    timeout 30 $C/$v/mlakit-bench --kernel sm90 --workload v3_128h_8192 --iters 20 --no-check 2>&1 | grep -E "cuda:0/|rror"
  done
done > $OUT/h128_modes.txt 2>&1
cat $OUT/h128_modes.txt; el h128
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_sectors.sum,sm__cycles_elapsed.avg.per_second
for k in 1 2 3; do
  for v in base qkvo; do
    echo "== ncu h128 $v process $k"
    timeout 60 ncu --clock-control none -k regex:prefill_sm90 --launch-skip 6 --launch-count 1 --metrics $M \
      $C/$v/mlakit-bench --kernel sm90 --workload v3_128h_8192 --iters 3 --warmup 5 --no-check 2>&1 | grep -E "^ +(gpu__|dram__|lts__|sm__)|cuda:0/|rror"
  done
done > $OUT/ncu_h128.txt 2>&1
cat $OUT/ncu_h128.txt; el ncu
