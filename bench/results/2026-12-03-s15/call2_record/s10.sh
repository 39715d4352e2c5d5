#!/bin/bash
# Session 15, device call 2, at the commit in carry10/COMMIT (kernel v12; MlaConfig::upload_in_run):
#  1. the C++ host probe of the MLA step (mlakit-bench seed --host-probe), both plan uploads, on a
#     quiet machine first; plan() cost from C++;
#  2. the MLA GPU tests (the graph tests in both upload modes) and compute-sanitizer memcheck of
#     the upload_in_run graph tests, beside the Python build;
#  3. the torch graph test in both modes, then compare_mla.py (N=1 and N=100 at budget 8192) with
#     both graph-replayed mlakit paths beside the FA2 and FlashInfer paths;
#  4. compare.py beside the peers with the time left (the kernel table; device time was short).
# Run from the repository root with carry ["carry10", ".peers"]; carry10/ holds build-cuda's
# mlakit-bench and tests/mlakit_gpu_tests (default flags) at that commit.
set -u
export MLAKIT_GIT_COMMIT=$(cat carry10/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( 590 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader; nproc; grep -m1 "model name" /proc/cpuinfo
B=carry10/mlakit-bench; T=carry10/mlakit_gpu_tests
mkdir -p /tmp/g
{ for u in "" --upload-in-run; do
    timeout 60 $B seed --requests 1 --budgets 8192 --modes graph --reps 7 --host-probe --no-check $u
    timeout 60 $B seed --requests 100 --budgets 8192 --modes graph --reps 3 --no-check $u
  done
  timeout 30 $B --plan-only; } > /tmp/g/seed_probe.txt 2>&1
grep -E "^host probe|^  [a-zA-Z]|Plan upload|Total step time, wall|Host share of total" /tmp/g/seed_probe.txt | head -60; el cpp-probe
timeout 280 $T --gtest_filter='*CudaMla*:-*sm80*' > /tmp/g/gpu_tests_mla.log 2>&1 & A=$!
timeout 280 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='*CudaMlaGraph*upload_in_run*' > /tmp/g/memcheck_mla_graph.log 2>&1 & S=$!
timeout 300 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j12 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
wait $A; echo "mla gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" /tmp/g/gpu_tests_mla.log | head
wait $S; echo "memcheck rc=$?: $(grep 'ERROR SUMMARY' /tmp/g/memcheck_mla_graph.log | tail -1)"; el tests
export PYTHONPATH=$PWD/build-py/python:$PWD/python
timeout 90 python3 -m pytest -q python/tests/test_gpu_mla_torch.py > /tmp/g/pytest_gpu_mla.log 2>&1; echo "pytest rc=$?"; tail -2 /tmp/g/pytest_gpu_mla.log
cp $B build-py/
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare-mla \
  COMPARE_MLA_ARGS="--cases 1:8192,100:8192 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_uir --reps 5" \
  timeout $(( $(left) - 240 )) scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare-mla; grep -E "host per step|target|total .* ms wall" /tmp/g/console.txt | head -60
tar czf $OUT/g.tgz -C /tmp g
mkdir -p /tmp/g2
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout $(( $(left) - 6 )) scripts/gpu-check /tmp/g2 > /tmp/g2/console.txt 2>&1
el compare; sed -n '/compare 1x999/,$p' /tmp/g2/summary.txt | head -30; grep -E "^  mlakit|^  flashinfer_fa3|^== " /tmp/g2/console.txt | tail -30
tar czf $OUT/g2.tgz -C /tmp g2; el done
