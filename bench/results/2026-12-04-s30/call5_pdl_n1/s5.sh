#!/bin/bash
# Session 30 call 5: Programmatic Dependent Launch on the graph-replayed MLA step, measured again
# (v9's one-sample A/B at N=1 and session 16's at N=100 read no gain; docs/pdl.md). One build with
# -DMLAKIT_PDL=ON (here, on the device), PDL on and off by MLAKIT_DISABLE_PDL=1 in the same binary:
# the C++ seed step at N=1 (graph mode, 21 passes) in three alternated rounds, with --host-probe
# in the first, the N=100 budget-8192 step in one round, and compare_mla.py's N=1 case (mlakit's
# two graph paths) in two alternated rounds.
set -u
source bench/device_env.sh
timeout 240 bash -c "cmake -S . -B build-pdl -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a \
  -DMLAKIT_PDL=ON -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=ON -DMLAKIT_BUILD_PYTHON=ON \
  -DPython_EXECUTABLE=$(command -v python3) > /tmp/pdl_build.txt 2>&1 && cmake --build build-pdl -j16 >> /tmp/pdl_build.txt 2>&1" \
  || tail -20 /tmp/pdl_build.txt
grep -m1 "PDL launches" /tmp/pdl_build.txt
el "build"
B=build-pdl/mlakit-bench
for r in 1 2 3; do
  for v in on off; do
    d=""; [ $v = off ] && d=1
    extra=""; [ $r = 1 ] && extra="--host-probe"
    MLAKIT_DISABLE_PDL=$d timeout 60 $B seed --requests 1 --budgets 8192 --modes graph --reps 21 $extra \
      > /tmp/seed_n1_${v}_r$r.txt 2>&1
    echo "== N=1 PDL $v r$r rc=$?"; grep -E "Total step time|Host share|Median step" /tmp/seed_n1_${v}_r$r.txt | head -6
  done
done 2>&1 | tee $OUT/seed_n1_summary.txt
el "seed N=1"
for v in on off; do
  d=""; [ $v = off ] && d=1
  MLAKIT_DISABLE_PDL=$d timeout 90 $B seed --requests 100 --budgets 8192 --modes graph --reps 3 --no-check > /tmp/seed_n100_$v.txt 2>&1
  echo "== N=100 PDL $v rc=$?"; grep -E "Total step time|Host share|Median step" /tmp/seed_n100_$v.txt | head -6
done 2>&1 | tee $OUT/seed_n100_summary.txt
el "seed N=100"
source bench/device_env.sh flashinfer > /dev/null
for r in 1 2; do
  for v in on off; do
    d=""; [ $v = off ] && d=1
    MLAKIT_DISABLE_PDL=$d PYTHONPATH=$PWD/build-pdl/python:$PWD/python timeout 120 python3 bench/compare_mla.py --cases 1:8192 \
      --paths mlakit_step_graph,mlakit_step_graph_native --reps 21 > /tmp/cm_${v}_r$r.log 2>&1
    echo "== compare_mla N=1 PDL $v r$r rc=$?"
    grep -E "^  N=1 budget 8192 |host per step" /tmp/cm_${v}_r$r.log | head -6
  done
done 2>&1 | tee $OUT/compare_mla_summary.txt
el "compare_mla"
tar czf $OUT/logs.tgz -C /tmp $(cd /tmp && ls cm_*.log seed_n100_*.txt seed_n1_*.txt)
