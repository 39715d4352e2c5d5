#!/bin/bash
# Session 13, last device call: cross-item + late claim tests and A/B bench only.
#  2. GPU tests of the cross-item build (all but the sm80 instantiations and the split tests);
#  3. mlakit-bench: v10 + late claim (base), v10 (lc0: early claim), cross-item (xi, xiu);
#  4. the build that wins 8x999+200 and 100x999 with its tests passing goes on to compare.py beside
#     the peers and compare_mla.py (N=1 and N=100 at budget 8192), plus plan() host cost.
set -u
export MLAKIT_GIT_COMMIT=$(cat carry4/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
T=carry4/v4/xt/mlakit_gpu_tests
timeout 110 $T --gtest_filter='-*sm80*:*Split*' > $OUT/gpu_tests_xi.log 2>&1; trc=$?; echo "gpu tests (cross-item, no split) rc=$trc"
grep -E "^\[  (FAILED|PASSED) |tests ran|SKIPPED \]|Failure" $OUT/gpu_tests_xi.log | head -20; el tests
WL="--workload 8x999+200 --workload 100x999 --workload 1x999 --workload v3_128h_8192 --workload 1x16384 --workload ctx_8x1024_vs_4096"
{ for r in 1 2; do for b in base lc0 xi; do
  [[ $r == 2 && $b == lc0 ]] && continue
  echo "== bench $b round $r"
  ck=--no-check; [[ $r == 1 && $b == xi* ]] && ck=""
  timeout 50 carry4/v4/$b/mlakit-bench --kernel sm90 $WL --iters 30 $ck 2>&1 | grep -E "cuda:0"
  for l in 2x999 8x999; do timeout 20 carry4/v4/$b/mlakit-bench --kernel sm90 --lens $l --iters 30 --no-check 2>&1 | grep -E "cuda:0" | sed "s/^custom /$l/"; done
done; done; } > $OUT/xi_bench.txt 2>&1
el bench; cat $OUT/xi_bench.txt
