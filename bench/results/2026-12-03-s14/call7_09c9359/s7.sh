#!/bin/bash
# Session 14, device call 8: v12 (the next item taken after the last P V's issue) against v11
# (42c3beb) in one run, then v12's sm90 GPU tests and compute-sanitizer over the sm90 tests.
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
WL="--workload 8x999+200 --workload 100x999 --workload 1x999 --workload v3_128h_8192 --workload 1x16384 --workload ctx_8x1024_vs_4096"
{ for r in 1 2; do for b in old new; do
  echo "== bench $b round $r"
  ck=--no-check; [[ $r == 1 && $b == new ]] && ck=""
  timeout 60 carry8/$b/mlakit-bench --kernel sm90 $WL --iters 30 $ck 2>&1 | grep -E "cuda:0|FAIL|rror"
  for l in 2x999 8x999 16x999; do timeout 20 carry8/$b/mlakit-bench --kernel sm90 --lens $l --iters 30 --no-check 2>&1 | grep -E "cuda:0" | sed "s/^custom /$l/"; done
done; done; } > $OUT/ab_bench.txt 2>&1
el bench; cat $OUT/ab_bench.txt
T=carry8/new/mlakit_gpu_tests
mkdir -p /tmp/t
timeout 200 $T --gtest_filter='-*sm80*:*Split*' > /tmp/t/gpu_nosplit.log 2>&1 & A=$!
timeout 200 $T --gtest_filter='*Split*:-*sm80*' > /tmp/t/gpu_split.log 2>&1 & B=$!
SAN='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90_h16_16_d128r64v128_bf16_causal:BlockSizes/CudaMlaGatherOp.*:Shapes/CudaMlaStep.*/sm90_h16_bs16_*'
for tool in memcheck racecheck synccheck; do
  f="$SAN-*SplitKeyRanges*"
  [[ $tool == racecheck ]] && f="${SAN%:Shapes/CudaMlaStep*}-*SplitKeyRanges*"
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > /tmp/t/san_$tool.log 2>&1 &
  eval "S_$tool=\$!"
done
wait $A; echo "gpu tests (no split) rc=$?"; wait $B; echo "gpu tests (split) rc=$?"
for f in /tmp/t/gpu_nosplit.log /tmp/t/gpu_split.log; do grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|tests? from .* ran|^\[  FAILED  \] [A-Z]" $f | head -12; done
for tool in memcheck racecheck synccheck; do eval "wait \$S_$tool"; rc=$?; echo "sanitize $tool rc=$rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/t/san_$tool.log | tail -1) $(grep -E '^\[  PASSED' /tmp/t/san_$tool.log)"; done
el tests
tar czf $OUT/tests.tgz -C /tmp t
