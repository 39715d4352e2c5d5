#!/bin/bash
# Session 13, device call: the cross-item consumer and the late claim, then the numbers of record.
#  1. two Python-binding builds in the background: build-pya (MLAKIT_SM90_LATE_CLAIM=1) and
#     build-pyb (+ MLAKIT_SM90_CROSS_ITEM=1);
#  2. GPU tests of the cross-item build (all but the sm80 instantiations and the split tests);
#  3. mlakit-bench: v10 + late claim (base), v10 (lc0: early claim), cross-item (xi, xiu);
#  4. the build that wins 8x999+200 and 100x999 with its tests passing goes on to compare.py beside
#     the peers and compare_mla.py (N=1 and N=100 at budget 8192), plus plan() host cost.
set -u
export MLAKIT_GIT_COMMIT=$(cat carry4/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
pyb() { timeout 200 bash -c "cmake -S . -B $1 -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON '-DCMAKE_CUDA_FLAGS=$2' -DPython_EXECUTABLE=$(command -v python3) > /tmp/$1.txt 2>&1 && cmake --build $1 -j7 >> /tmp/$1.txt 2>&1" || tail -5 /tmp/$1.txt; }
( pyb build-pya "-DMLAKIT_SM90_LATE_CLAIM=1" ) & 
( pyb build-pyb "-DMLAKIT_SM90_LATE_CLAIM=1 -DMLAKIT_SM90_CROSS_ITEM=1" ) &
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
# Pick: cross-item when its tests passed, its reference checks passed, and its 8x999+200 and
# 100x999 medians (both rounds) beat base's.
pick=$(python3 - "$OUT/xi_bench.txt" "$trc" <<'PY'
import sys, re, collections
txt = open(sys.argv[1]).read().split("== bench ")
tf = collections.defaultdict(list); bad = False
for blk in txt[1:]:
    name = blk.split()[0]
    for line in blk.splitlines()[1:]:
        f = line.split()
        if len(f) > 6 and f[1].startswith("cuda"):
            tf[(name, f[0])].append(float(f[5]))
            if "FAIL" in line: bad = True
ok = sys.argv[2] == "0" and not bad
win = all(min(tf[("xi", w)]) > max(tf[("base", w)]) for w in ("8x999+200", "100x999") if tf[("xi", w)] and tf[("base", w)])
print("build-pyb" if ok and win else "build-pya")
PY
)
echo "picked $pick"; echo "$pick" > $OUT/picked.txt
wait; el pybuild
cp carry4/v4/base/mlakit-bench $pick/ 2>/dev/null
mkdir -p /tmp/g
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=$pick GPU_CHECK_STEPS=flashinfer,compare,compare-mla \
  COMPARE_ARGS="--overhead none" COMPARE_MLA_ARGS="--cases 1:8192,100:8192 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph --reps 2" \
  timeout 330 scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare; grep -E "mla N=|target|host per step" /tmp/g/console.txt | head -30; cat /tmp/g/summary.txt 2>/dev/null | head -30
PYTHONPATH=$PWD/$pick/python:$PWD/python timeout 30 python3 bench/mla_plan_cost.py --iters 300 > /tmp/g/plan_cost.txt 2>&1; cat /tmp/g/plan_cost.txt
tar czf $OUT/g.tgz -C /tmp g; el done
