#!/bin/bash
# Device call 4 of session 19: Q's fragments in registers for S = Q K^T (A from registers, so the
# S wgmmas read only K from shared memory). Uncommitted on the commit in carry25/COMMIT (digest
# carry25/DIGEST). carry25/: base = v14's mlakit-bench (eeae8ea); q4 / q8 = builds with
# -DMLAKIT_SM90_Q_REG_KSTEPS=4 / 8 (Q's first 64 / 128 columns in registers, the rest SS; the
# d128 kernels then hold all of Q in registers and free Q's buffer after loading it).
#  1. sm90 tests of q4 and q8; 2. A/B base / q4 / q8, two rounds, round 1 reference-checked.
# Run from the repository root with carry ["carry25"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry25/COMMIT)
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90*:Kernels/CudaScale.BatchInvariantBitwise/sm90:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90*'
for v in q4 q8; do
  timeout 100 carry25/$v/mlakit_gpu_tests --gtest_filter="$F" > $OUT/gpu_$v.log 2>&1; echo "$v tests rc=$?"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" $OUT/gpu_$v.log | tail -6
done
el tests
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload ctx_8x1024_vs_4096 --workload 100x999 --workload 8x999+200 --workload 1x999"
for r in 1 2; do
  for v in base q4 q8; do
    chk=""; [ $r = 2 ] && chk="--no-check"
    echo "== round $r $v"
    timeout 90 carry25/$v/mlakit-bench --kernel sm90 $WL --iters 20 $chk 2>&1 | grep -E "cuda:0/|FAIL|rror"
  done
done > $OUT/ab_bench.txt 2>&1
cat $OUT/ab_bench.txt; el done
