#!/bin/bash
# Device call 3 of session 19: 2-CTA clusters with the consumers' remote stage releases at the
# default (CTA-scope) semantics (call 2's .release.cluster put MEMBAR.ALL.GPU before every one).
# carry24/: mlakit_gpu_tests + mlakit-bench (uncommitted on 8b69476, digest in carry24/DIGEST),
# base/mlakit-bench = v14 (eeae8ea). Tests with clusters, then A/B base / cluster 2 / cluster 1,
# two rounds, round 1 reference-checked.
# Run from the repository root with carry ["carry24"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry24/COMMIT)
T=carry24/mlakit_gpu_tests
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90*:Kernels/CudaGraph*/sm90:Kernels/CudaScale.*/sm90:Shapes/CudaSplitK.*/sm90*'
timeout 150 $T --gtest_filter="$F" > $OUT/gpu_c2.log 2>&1; echo "cluster 2 tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" $OUT/gpu_c2.log | tail -8
el c2
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 100x999 --workload 8x999+200 --workload 1x999"
for r in 1 2; do
  for v in base c2 c1; do
    chk=""; [ $r = 2 ] && chk="--no-check"
    echo "== round $r $v"
    case $v in
      base) timeout 90 carry24/base/mlakit-bench --kernel sm90 $WL --iters 20 $chk ;;
      c2) MLAKIT_SM90_CLUSTER=2 timeout 90 carry24/mlakit-bench --kernel sm90 $WL --iters 20 $chk ;;
      c1) MLAKIT_SM90_CLUSTER=1 timeout 90 carry24/mlakit-bench --kernel sm90 $WL --iters 20 $chk ;;
    esac 2>&1 | grep -E "cuda:0/|FAIL|rror"
  done
done > $OUT/ab_bench.txt 2>&1
cat $OUT/ab_bench.txt; el done
