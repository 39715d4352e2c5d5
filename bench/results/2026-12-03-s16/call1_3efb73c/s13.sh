#!/bin/bash
# Prepared for the next device call (not run: this session's device time was spent). At the commit
# in carry11/COMMIT (build-cuda's mlakit-bench and tests/mlakit_gpu_tests, default flags):
#  1. every sm90 and MLA GPU test (the review fixes and the new StreamGraph / eager upload_in_run
#     tests have not run on a GPU yet) and compute-sanitizer memcheck / synccheck of the MLA graph
#     tests, beside the Python build;
#  2. compare_mla.py with the harness fixed (every profiled pass after every timed pass): N=1 and
#     N=100 at budgets 8192 and 2048, the three graph-replayed mlakit paths beside FA2 and FlashInfer;
#  3. ncu --set full of one 100x999 launch (#6: what limits the ragged batch at v12).
# Run from the repository root with carry ["carry11", ".peers"]:
#   bash bench/results/2026-12-03-s16/call1_3efb73c/s13.sh
set -u
export MLAKIT_GIT_COMMIT=$(cat carry11/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( 585 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader; nproc; grep -m1 "model name" /proc/cpuinfo
B=carry11/mlakit-bench; T=carry11/mlakit_gpu_tests
mkdir -p /tmp/g
timeout 240 $T --gtest_filter='-*sm80*' > /tmp/g/gpu_tests.log 2>&1 & A=$!
F='Upload/CudaMlaGraph.*/upload_in_run:CudaStreamGraph.*:Layouts/CudaMlaSteps.*upload_in_run'
{ for tool in memcheck synccheck; do timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$F" 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | sed "s/^/$tool: /"; done; } > /tmp/g/sanitize_mla.log 2>&1 & S=$!
timeout 240 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j8 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
wait $A; echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" /tmp/g/gpu_tests.log | head
wait $S; cat /tmp/g/sanitize_mla.log; el tests
export PYTHONPATH=$PWD/build-py/python:$PWD/python
timeout 90 python3 -m pytest -q python/tests/test_gpu_mla_torch.py > /tmp/g/pytest_gpu_mla.log 2>&1; echo "pytest rc=$?"; tail -2 /tmp/g/pytest_gpu_mla.log
cp $B build-py/
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare-mla \
  COMPARE_MLA_ARGS="--cases 1:8192,100:8192,1:2048,100:2048 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_uir,mlakit_step_graph_native --reps 5" \
  timeout $(( $(left) - 90 )) scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare-mla; grep -E "host per step|target|total .* ms wall|host share" /tmp/g/console.txt | head -80
timeout $(( $(left) - 10 )) ncu --clock-control none --set full --import-source yes -k regex:prefill_sm90 --launch-skip 3 --launch-count 1 \
  -o /tmp/g/n100 $B --kernel sm90 --workload 100x999 --iters 2 --warmup 3 --no-check --rotate 1 > /tmp/g/ncu.log 2>&1
ncu -i /tmp/g/n100.ncu-rep --page details > /tmp/g/v12_100x999_details.txt 2>&1
ncu -i /tmp/g/n100.ncu-rep --page source --print-source sass --csv > /tmp/n100_src.csv 2>&1 && python3 bench/ncu_stalls.py /tmp/n100_src.csv 60 > /tmp/g/v12_100x999_stalls.txt 2>&1
rm -f /tmp/g/n100.ncu-rep; el ncu
tar czf $OUT/g.tgz -C /tmp g; el done
