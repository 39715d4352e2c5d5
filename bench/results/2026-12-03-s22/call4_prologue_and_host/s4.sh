#!/bin/bash
# Device call 4 of session 22. (a) host_parts.py: what is left of run()'s host time at 1x999
# after the exchange table (map-cache hit vs miss, the allocation). (b) What the per-block tensor
# map rewrite at kernel start costs: v15 against the EXP_PARAM_MAPS build (the parameter's maps
# used as encoded; timing only, correct for mlakit-bench's exact views), short launches, ABAB.
# Prediction: 1x999 -1 to -2 us (0.024 -> ~0.022-0.023 ms), ctx 799/200 likewise, the long
# ragged batches unchanged within noise (one rewrite per block per launch).
# Run with carry ["carry3"] (base = 81ab9c0's kernel = HEAD's; pmaps = -DMLAKIT_SM90_EXP_PARAM_MAPS=1).
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
D=bench/results/2026-12-03-s22
timeout 170 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1" || { tail -5 /tmp/pyb.txt; }
el pybuild
export PYTHONPATH="$PWD/build-py/python:$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
timeout 100 python3 $D/call4_prologue_and_host/host_parts.py 2>&1 | grep -v Warning
el host_parts
for r in 1 2; do
  for b in base pmaps; do
    timeout 120 carry3/mlakit-bench-$b --kernel sm90 --workload 1x999 --workload ctx_799_vs_200 --workload 8x999+200 \
      --workload 100x999 --lens 2x999 --causal --heads 16 --iters 50 2>&1 | grep "cuda:0/" | sed "s/^/$b r$r: /"
    timeout 60 carry3/mlakit-bench-$b --kernel sm90 --lens 8x999 --causal --heads 16 --iters 50 2>&1 | grep "cuda:0/" | sed "s/^/$b r$r: /"
  done
  el round$r
done
