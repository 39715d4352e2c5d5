#!/bin/bash
# Session 14, device call 1: the late claim and the cross-item consumer, A/B and tests, then the
# winner beside the peers (compare.py, compare_mla.py) and plan() host cost.
set -u
export MLAKIT_GIT_COMMIT=$(cat carry5/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( 585 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
pyb() { timeout 240 bash -c "cmake -S . -B $1 -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON '-DCMAKE_CUDA_FLAGS=$2' -DPython_EXECUTABLE=$(command -v python3) > /tmp/$1.txt 2>&1 && cmake --build $1 -j7 >> /tmp/$1.txt 2>&1" || tail -5 /tmp/$1.txt; }
( pyb build-pya "-DMLAKIT_SM90_LATE_CLAIM=1" ) &
( pyb build-pyb "-DMLAKIT_SM90_LATE_CLAIM=1 -DMLAKIT_SM90_CROSS_ITEM=1" ) &
B=carry5/b
WL="--workload 8x999+200 --workload 100x999 --workload 1x999 --workload v3_128h_8192 --workload 1x16384 --workload ctx_8x1024_vs_4096"
{ for r in 1 2; do for b in lc0 base xi xiu; do
  [[ $r == 2 && $b == xiu ]] && continue
  echo "== bench $b round $r"
  ck=--no-check; [[ $r == 1 ]] && ck=""
  timeout 60 $B/$b/mlakit-bench --kernel sm90 $WL --iters 30 $ck 2>&1 | grep -E "cuda:0|FAIL|rror"
  for l in 2x999 8x999 16x999; do timeout 20 $B/$b/mlakit-bench --kernel sm90 --lens $l --iters 30 --no-check 2>&1 | grep -E "cuda:0" | sed "s/^custom /$l/"; done
done; done; } > $OUT/ab_bench.txt 2>&1
el bench; cat $OUT/ab_bench.txt
timeout 130 $B/xt/mlakit_gpu_tests --gtest_filter='-*sm80*:*Split*' > $OUT/gpu_tests_xt.log 2>&1; xrc=$?; echo "gpu tests cross-item rc=$xrc"
grep -E "^\[  (FAILED|PASSED) |tests ran|SKIPPED \]|Failure" $OUT/gpu_tests_xt.log | head -20; el tests-xt
pick=$(python3 - "$OUT/ab_bench.txt" "$xrc" <<'PY'
import sys, collections
txt = open(sys.argv[1]).read().split("== bench ")
tf = collections.defaultdict(list); bad = set()
for blk in txt[1:]:
    name = blk.split()[0]
    for line in blk.splitlines()[1:]:
        f = line.split()
        if "FAIL" in line or "rror" in line: bad.add(name)
        if len(f) > 6 and f[1].startswith("cuda"):
            tf[(name, f[0])].append(float(f[5]))
ok = sys.argv[2] == "0" and "xi" not in bad
win = all(min(tf[("xi", w)]) > max(tf[("base", w)]) for w in ("8x999+200", "100x999") if tf[("xi", w)] and tf[("base", w)])
print("build-pyb" if ok and win else "build-pya")
PY
)
echo "picked $pick"; echo "$pick" > $OUT/picked.txt
if [[ $pick == build-pya ]]; then
  timeout 130 $B/lt/mlakit_gpu_tests --gtest_filter='-*sm80*:*Split*' > $OUT/gpu_tests_lt.log 2>&1; echo "gpu tests late-claim rc=$?"
  grep -E "^\[  (FAILED|PASSED) |tests ran|SKIPPED \]|Failure" $OUT/gpu_tests_lt.log | head -20; el tests-lt
fi
wait; el pybuild; ls $pick/python 2>&1 | head -3
cp $B/base/mlakit-bench $pick/ 2>/dev/null
mkdir -p /tmp/g
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=$pick GPU_CHECK_STEPS=flashinfer,compare,compare-mla \
  COMPARE_ARGS="--overhead none" COMPARE_MLA_ARGS="--cases 1:8192,100:8192 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph --reps 2" \
  timeout $(( $(left) - 25 )) scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare; grep -E "mla N=|target|host per step" /tmp/g/console.txt | head -30; cat /tmp/g/summary.txt 2>/dev/null | head -30
PYTHONPATH=$PWD/$pick/python:$PWD/python timeout 20 python3 bench/mla_plan_cost.py --iters 300 > /tmp/g/plan_cost.txt 2>&1; cat /tmp/g/plan_cost.txt
tar czf $OUT/g.tgz -C /tmp g; el done
