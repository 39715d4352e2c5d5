#!/bin/bash
# Device call 1 of session 17: the softmax's critical path (docs/perf-notes.md, "Session of
# 2026-12-03 (sixth)"). Variants of the sm90 kernel, all else equal (carry14/<v>/mlakit-bench,
# 90a builds of the commit in carry14/COMMIT, `-DCMAKE_CUDA_FLAGS=` as named):
#   m1   = -DMLAKIT_SOFTMAX_MAX_PARTS=1   (v12's order: one 32-deep FMNMX chain per row)
#   m4   = defaults (row max in 4 chains; build-cuda's binaries, also its mlakit_gpu_tests)
#   m4s4 = -DMLAKIT_SOFTMAX_SUM_PARTS=4   (+ row sum in 4 chains)
#   p4   = -DMLAKIT_SOFTMAX_POLY_EXP2_EVERY=4 (+ every 4th key block's exp2 on the FMA pipe; also tests)
#   p8   = -DMLAKIT_SOFTMAX_POLY_EXP2_EVERY=8
# carry ["carry14"]. Run from the repository root: bash bench/results/2026-12-03-s17/s18.sh
#  1. A/B, two rounds interleaved, round 1 of all but m1 reference-checked (1x32768 round 2 only);
#  2. m4's GPU tests (all but sm80: sm90, MLA, graph, StreamGraph), p4's sm90 tests, and
#     compute-sanitizer memcheck (MLA graph + StreamGraph, sm90 prefill) / racecheck / synccheck on m4.
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry14/COMMIT)
WL="--workload 8x999+200 --workload 100x999 --workload 1x999 --workload v3_128h_8192 --workload 1x16384 --workload ctx_8x1024_vs_4096"
{ for r in 1 2; do for b in m1 m4 m4s4 p4 p8; do
  echo "== bench $b round $r"
  ck=--no-check; [[ $r == 1 && $b != m1 ]] && ck=""
  w="$WL"; [[ $r == 2 ]] && w="$WL --workload 1x32768"
  timeout 90 carry14/$b/mlakit-bench --kernel sm90 $w --iters 30 $ck 2>&1 | grep -E "cuda:0|FAIL|rror"
  for l in 2x999 8x999 16x999; do timeout 20 carry14/$b/mlakit-bench --kernel sm90 --lens $l --iters 30 --no-check 2>&1 | grep -E "cuda:0" | sed "s/^custom /$l/"; done
done; done; } > $OUT/ab_bench.txt 2>&1
el bench; cat $OUT/ab_bench.txt
mkdir -p /tmp/t; T=carry14/m4/mlakit_gpu_tests
timeout 240 $T --gtest_filter='-*sm80*' > /tmp/t/gpu_m4.log 2>&1 & A=$!
timeout 240 carry14/p4/mlakit_gpu_tests --gtest_filter='*sm90*:-*Mla*' > /tmp/t/gpu_p4.log 2>&1 & B=$!
SAN='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90_h16_16_d128r64v128_bf16_causal'
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 $T \
  --gtest_filter="$SAN:Upload/CudaMlaGraph.*/upload_in_plan:CudaStreamGraph.*:-*SplitKeyRanges*" > /tmp/t/san_memcheck.log 2>&1 & S1=$!
timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 $T --gtest_filter="$SAN:-*SplitKeyRanges*" > /tmp/t/san_racecheck.log 2>&1 & S2=$!
timeout 240 compute-sanitizer --tool synccheck --error-exitcode 9 $T --gtest_filter="$SAN:-*SplitKeyRanges*" > /tmp/t/san_synccheck.log 2>&1 & S3=$!
wait $A; echo "m4 gpu tests rc=$?"; wait $B; echo "p4 sm90 tests rc=$?"
for f in /tmp/t/gpu_m4.log /tmp/t/gpu_p4.log; do grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $f | head -12; done
for s in S1:memcheck S2:racecheck S3:synccheck; do eval "wait \$${s%%:*}"; echo "sanitize ${s#*:} rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/t/san_${s#*:}.log | tail -1)"; done
el tests; tar czf $OUT/tests.tgz -C /tmp t
el done
