#!/bin/bash
# Session 15, device call 3, at the commit in carry10/COMMIT: mlakit.StreamGraph and
# MlaStep.plan(..., replay=graph).
#  1. the MLA GPU tests (StreamGraph, both upload modes) and compute-sanitizer memcheck of the
#     StreamGraph test, beside the Python build;
#  2. the torch MLA tests (graph and StreamGraph, both modes);
#  3. compare_mla.py, N=1 and N=100 at budget 8192, the three graph-replayed mlakit
#     paths (torch graph, torch graph + upload_in_run, StreamGraph + one-call plan) beside the FA2
#     and FlashInfer paths.
# Run from the repository root with carry ["carry10", ".peers"].
set -u
export MLAKIT_GIT_COMMIT=$(cat carry10/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( 330 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader; nproc; grep -m1 "model name" /proc/cpuinfo
B=carry10/mlakit-bench; T=carry10/mlakit_gpu_tests
mkdir -p /tmp/g
timeout 200 $T --gtest_filter='*CudaMla*:-*sm80*' > /tmp/g/gpu_tests_mla.log 2>&1 & A=$!
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='*CudaMlaGraph.StreamGraph*' > /tmp/g/memcheck_stream_graph.log 2>&1 & S=$!
timeout 240 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j12 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
wait $A; echo "mla gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" /tmp/g/gpu_tests_mla.log | head
wait $S; echo "memcheck rc=$?: $(grep 'ERROR SUMMARY' /tmp/g/memcheck_stream_graph.log | tail -1)"; el tests
export PYTHONPATH=$PWD/build-py/python:$PWD/python
timeout 90 python3 -m pytest -q python/tests/test_gpu_mla_torch.py > /tmp/g/pytest_gpu_mla.log 2>&1; echo "pytest rc=$?"; tail -2 /tmp/g/pytest_gpu_mla.log
cp $B build-py/
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare-mla \
  COMPARE_MLA_ARGS="--cases 1:8192,100:8192 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_uir,mlakit_step_graph_native --reps 5" \
  timeout $(( $(left) - 6 )) scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare-mla; grep -E "host per step|target|total .* ms wall" /tmp/g/console.txt | head -80
tar czf $OUT/g.tgz -C /tmp g; el done
