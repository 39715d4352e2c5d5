#!/bin/bash
# Device call 5 of session 23, at v16b (carry1/COMMIT):
#  1. plan()/run() host cost from C++ (mlakit-bench --plan-only), three processes;
#  2. ncu, clocks locked at base, of the 1x32768 non-causal launch of mlakit and of FlashInfer fa3
#     as compare.py calls them (--iters 1 --warmup 0): cycles, instructions by pipe, tensor pipe
#     use, L2 and DRAM bytes. Session 21 found the two level rested and fa3 1.6-2.5% ahead back to
#     back (the power cap): the question is which per-tile work (instructions, bytes moved) fa3
#     spends less of. Prediction: cycles within 2%; fa3 fewer instructions per tile or fewer
#     L2 -> SM bytes.
# Carry ["carry1", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
for r in 1 2 3; do carry1/mb-v16b --plan-only --device cuda 2>&1 | grep -v '^$' | tail -6; done > $OUT/plan_only.txt 2>&1
cat $OUT/plan_only.txt; el plan_only
timeout 200 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi.txt 2>&1 || tail -3 /tmp/fi.txt
export PYTHONPATH=$PWD/build-py/python:$PWD/python:${PYTHONPATH:-}
el setup
timeout 300 ncu --clock-control base -k 'regex:prefill_sm90_kernel|PrefillWithKVCache' -c 6 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
  --metrics smsp__inst_executed.sum,sm__cycles_elapsed.max,lts__t_bytes.sum,dram__bytes_read.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_xu.sum \
  python3 bench/compare.py --workload 1x32768 --methods mlakit,flashinfer_fa3 --iters 1 --warmup 0 --no-ceilings \
  --check-rows 8 --plan-iters 1 --overhead none > $OUT/ncu_1x32768.txt 2>&1
echo "ncu rc=$?"; el ncu
grep -E '^\s+(prefill_sm90|.*PrefillWithKVCache|void)|Duration|Elapsed Cycles|SM Frequency|Executed Ipc Active|smsp__inst_executed.sum|sm__cycles_elapsed.max|lts__t_bytes.sum|dram__bytes_read.sum|pipe_(fma|alu|xu)|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Issue Slots Busy' $OUT/ncu_1x32768.txt | cut -c1-150 | head -120
