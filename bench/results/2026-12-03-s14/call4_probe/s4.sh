#!/bin/bash
# Session 14, device call 4: why replay() of the MLA step's graph holds the host ~45 us (a graph of
# 81 torch kernels launches in ~3 us): graph_launch_probe.py --mlakit (graphs of mlakit's ragged
# prefill alone and of the MLA step, node types from the debug dump), and the step probe again.
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 300 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
export PYTHONPATH=$PWD/build-py/python:$PWD/python
timeout 120 python3 bench/graph_launch_probe.py --reps 100 --mlakit > $OUT/graph_probe.txt 2>&1; cat $OUT/graph_probe.txt
timeout 60 python3 bench/mla_graph_host_probe.py --reps 50 > $OUT/step_probe.txt 2>&1; cat $OUT/step_probe.txt
gzip -c /tmp/mla_graph.dot > $OUT/mla_graph.dot.gz 2>/dev/null; el done
