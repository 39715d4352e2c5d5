#!/bin/bash
# Prepared for the next session (session 23's device time ran out): where mlakit's extra cycles
# against fa3 sit on 1x32768 at locked clocks (call 5: 23.72 M against 22.57 M cycles, tensor pipe
# 85.8% against 90.3%; v17's 44 fewer uniform instructions per warp and tile gained nothing).
#  1. per-opcode counts with their names (--print-metric-instances details) for one launch each;
#  2. warp-stall sampling by source line for each kernel (SourceCounters, clocks locked), and
#     bench/ncu_stalls.py over the SASS pages: which stall reasons and which instructions hold
#     mlakit's consumers that do not hold fa3's.
# Build here: a 90a build of HEAD; nothing to carry beyond .peers (the binding builds on the device).
# Run with carry [".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 200 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi.txt 2>&1 || tail -3 /tmp/fi.txt
export PYTHONPATH=$PWD/build-py/python:$PWD/python:${PYTHONPATH:-}
ARGS="--workload 1x32768 --methods mlakit,flashinfer_fa3 --iters 1 --warmup 0 --no-ceilings --check-rows 8 --plan-iters 1 --overhead none"
el setup
timeout 150 ncu --clock-control base -k 'regex:prefill_sm90_kernel|PrefillWithKVCache' -c 4 \
  --metrics sass__inst_executed_per_opcode --print-metric-instances details \
  python3 bench/compare.py $ARGS > $OUT/ncu_opcodes_named.txt 2>&1
el opcodes
timeout 300 ncu --clock-control base -k 'regex:prefill_sm90_kernel|PrefillWithKVCache' -c 4 --section SourceCounters \
  --section WarpStateStats -o /tmp/stalls python3 bench/compare.py $ARGS > /tmp/ncu_stalls_run.txt 2>&1
el stalls
for k in prefill_sm90_kernel PrefillWithKVCache; do
  ncu -i /tmp/stalls.ncu-rep -k "regex:$k" --launch-count 1 --page source --print-source sass --csv \
    > /tmp/src_$k.csv 2>/dev/null && python3 bench/ncu_stalls.py /tmp/src_$k.csv 40 > $OUT/stalls_$k.txt
done
ncu -i /tmp/stalls.ncu-rep --page details --section WarpStateStats > $OUT/warp_states.txt 2>&1
el done
