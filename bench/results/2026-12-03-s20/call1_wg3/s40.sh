#!/bin/bash
# Device call 1 of session 20: three consumer warpgroups (a 192-row q tile, 112-key kv tiles,
# 160 registers per consumer thread, each warpgroup's kv tiles sequential: S, softmax, P V),
# built with -DMLAKIT_SM90_CONSUMER_WG=3 (build-v/wg3, 90a) from the tree of carry28/DIGEST
# (uncommitted on carry28/COMMIT). carry28/base/mlakit-bench = v14 (80;90a).
#  1. sm90 prefill, scale, graph, split-K and MLA step GPU tests on the wg3 build;
#  2. A/B v14 / wg3, two rounds, round 1 reference-checked.
# Run from the repository root with carry ["carry28"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry28/COMMIT)
T=carry28/mlakit_gpu_tests
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90*:Kernels/CudaScale.*/sm90:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90*:Shapes/CudaMlaStep.*/sm90_*'
timeout 150 $T --gtest_filter="$F" > $OUT/gpu_wg3.log 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $OUT/gpu_wg3.log | tail -12
el tests
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 100x999 --workload 8x999+200 --workload 1x999"
for r in 1 2; do
  for v in base wg3; do
    chk=""; [ $r = 2 ] && chk="--no-check"
    B=carry28/mlakit-bench; [ $v = base ] && B=carry28/base/mlakit-bench
    echo "== round $r $v"
    timeout 100 $B --kernel sm90 $WL --iters 20 $chk 2>&1 | grep -E "cuda:0/|FAIL|rror"
  done
done > $OUT/ab_bench.txt 2>&1
cat $OUT/ab_bench.txt; el bench
