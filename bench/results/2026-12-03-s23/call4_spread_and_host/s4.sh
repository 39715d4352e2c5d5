#!/bin/bash
# Device call 4 of session 23, at v16b (carry1/COMMIT):
#  1. two more compare.py passes (gpu-check steps flashinfer,compare), for the spread of call 2's
#     table (100x999 read 502 there, 487-493 in every earlier table);
#  2. where the N=1 step's host time goes: bench/mla_plan_cost.py --after-sync, the process free
#     to migrate against pinned to one core (taskset -c 5); then compare_mla.py at N=1 (budget
#     8192) on mlakit's two graph paths, unpinned / pinned alternated twice. Prediction: if plan()'s
#     55-70 us after a GPU wait is the thread waking on a cold core, pinning cuts it to ~15 us and
#     the N=1 host share from ~14% toward ~9%.
# Carry ["carry1", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
export MLAKIT_GIT_COMMIT=$(cat carry1/COMMIT)
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader; nproc; lscpu | grep -E 'Model name|Socket|NUMA node\(s\)|L3' 
timeout 200 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
export PYTHONPATH=$PWD/build-py/python:$PWD/python
for p in unpinned pinned; do
  pre=""; [[ $p == pinned ]] && pre="taskset -c 5"
  echo "== mla_plan_cost --after-sync, $p"; timeout 60 $pre python3 bench/mla_plan_cost.py --after-sync --iters 300 2>&1 | tail -20
done > $OUT/plan_cost.txt 2>&1; cat $OUT/plan_cost.txt; el plan_cost
for r in 1 2; do for p in unpinned pinned; do
  pre=""; [[ $p == pinned ]] && pre="taskset -c 5"
  echo "== compare_mla N=1, $p, round $r"
  timeout 90 $pre python3 bench/compare_mla.py --cases 1:8192 --paths mlakit_step_graph,mlakit_step_graph_native --reps 5 2>&1 | grep -E "host per step|host share|total .*wall"
done; done > $OUT/mla_n1.txt 2>&1; cat $OUT/mla_n1.txt; el mla_n1
for g in A B; do
  mkdir -p /tmp/g$g
  MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
    timeout 200 scripts/gpu-check /tmp/g$g > /tmp/g$g/console.txt 2>&1
  el compare $g; sed -n '/^| workload | mlakit ms/,/^$/p' /tmp/g$g/summary.txt | head -12
  for f in summary.txt compare.json; do cp /tmp/g$g/$f $OUT/${g}_$f; done
done
el done
