#!/bin/bash
# Session 14, device call 6: a second sample of the numbers of record at the commit in
# carry6/COMMIT (kernel as 42c3beb): compare_mla.py (N=1 and N=100 at budgets 8192 and 2048),
# compare.py beside the peers, and the host probes, on whatever machine this call gets.
set -u
export MLAKIT_GIT_COMMIT=$(cat carry6/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( 590 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader; nproc; grep -m1 "model name" /proc/cpuinfo
timeout 300 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
export PYTHONPATH=$PWD/build-py/python:$PWD/python
mkdir -p /tmp/g /tmp/g2
{ timeout 60 python3 bench/mla_graph_host_probe.py --reps 50; timeout 60 python3 bench/graph_launch_probe.py --reps 100 --mlakit 2>&1 | grep -v Warn; } > /tmp/g/host_probe.txt 2>&1; cat /tmp/g/host_probe.txt; el probes
cp carry6/bin/mlakit-bench build-py/
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare-mla \
  COMPARE_MLA_ARGS="--cases 1:8192,100:8192,1:2048,100:2048 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph --reps 5" \
  timeout $(( $(left) - 120 )) scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare-mla; grep -E "host per step|target|^  mla N=" /tmp/g/console.txt | head -40
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout $(( $(left) - 8 )) scripts/gpu-check /tmp/g2 > /tmp/g2/console.txt 2>&1
el compare; sed -n '/compare 1x999/,$p' /tmp/g2/summary.txt | head -30
tar czf $OUT/g.tgz -C /tmp g g2; el done
