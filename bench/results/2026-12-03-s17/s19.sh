#!/bin/bash
# Device call 2 of session 17 (docs/perf-notes.md, "Session of 2026-12-03 (sixth)"). Variants of
# the sm90 kernel (carry15/<v>/mlakit-bench, 90a builds of the commit in carry15/COMMIT, with
# `-DCMAKE_CUDA_FLAGS=` as named):
#   v12   = defaults (build-cuda's binary; SASS identical to v12's)
#   rs    = -DMLAKIT_SM90_RESCALE_SKIP=1 (a warp skips O's rescale when no row max moved)
#   dp150 = -DMLAKIT_SM90_DEPHASE_NS=150 (consumer warpgroup 2 sleeps ~150 ns before an item's first S)
#   dp500 = -DMLAKIT_SM90_DEPHASE_NS=500
#   rsdp  = both rs and dp150 (also tests)
#   th8   = rs + -DMLAKIT_SOFTMAX_RESCALE_THRESHOLD=8 (a row keeps a stale max unless the new one
#           exceeds it by more than 8 in log2 units, FlashAttention-4's conditional rescale; also tests)
# carry ["carry15"]. Run from the repository root: bash bench/results/2026-12-03-s17/s19.sh
#  1. A/B, two rounds interleaved, round 1 of all but v12 reference-checked (1x32768 in round 2);
#  2. th8's and rsdp's sm90 + MLA GPU tests; racecheck / synccheck over rsdp's sm90 prefill tests.
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry15/COMMIT)
WL="--workload 8x999+200 --workload 100x999 --workload 1x999 --workload v3_128h_8192 --workload 1x16384 --workload ctx_8x1024_vs_4096"
{ for r in 1 2; do for b in v12 rs dp150 dp500 rsdp th8; do
  echo "== bench $b round $r"
  ck=--no-check; [[ $r == 1 && $b != v12 ]] && ck=""
  w="$WL"; [[ $r == 2 ]] && w="$WL --workload 1x32768"
  timeout 90 carry15/$b/mlakit-bench --kernel sm90 $w --iters 30 $ck 2>&1 | grep -E "cuda:0|FAIL|rror"
  for l in 2x999 8x999 16x999; do timeout 20 carry15/$b/mlakit-bench --kernel sm90 --lens $l --iters 30 --no-check 2>&1 | grep -E "cuda:0" | sed "s/^custom /$l/"; done
done; done; } > $OUT/ab_bench.txt 2>&1
el bench; cat $OUT/ab_bench.txt
mkdir -p /tmp/t
timeout 240 carry15/th8/mlakit_gpu_tests --gtest_filter='*sm90*:*Mla*:-*sm80*' > /tmp/t/gpu_th8.log 2>&1 & A=$!
timeout 240 carry15/rsdp/mlakit_gpu_tests --gtest_filter='*sm90*:*Mla*:-*sm80*' > /tmp/t/gpu_rsdp.log 2>&1 & B=$!
SAN='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90_h16_16_d128r64v128_bf16_causal:-*SplitKeyRanges*'
timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 carry15/rsdp/mlakit_gpu_tests --gtest_filter="$SAN" > /tmp/t/san_racecheck.log 2>&1 & S2=$!
timeout 240 compute-sanitizer --tool synccheck --error-exitcode 9 carry15/rsdp/mlakit_gpu_tests --gtest_filter="$SAN" > /tmp/t/san_synccheck.log 2>&1 & S3=$!
wait $A; echo "th8 gpu tests rc=$?"; wait $B; echo "rsdp gpu tests rc=$?"
for f in /tmp/t/gpu_th8.log /tmp/t/gpu_rsdp.log; do grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $f | head -12; done
for s in S2:racecheck S3:synccheck; do eval "wait \$${s%%:*}"; echo "sanitize ${s#*:} rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/t/san_${s#*:}.log | tail -1)"; done
el tests; tar czf $OUT/tests.tgz -C /tmp t
el done
