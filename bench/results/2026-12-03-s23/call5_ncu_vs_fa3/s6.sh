#!/bin/bash
# Device call 6 of session 23: call 5's ncu found mlakit's 1x32768 launch at 23.72 M cycles against
# fa3's 22.57 M (clocks locked at base), tensor pipe 85.8% against 90.3% of elapsed cycles, and
# 5.03 G warp instructions against 4.48 G, the excess outside the FMA, ALU and XU pipes. Which
# opcodes: sass__inst_executed_per_opcode for one launch of each. It ran with "values", which prints the counts without their opcode names (out/ncu_opcodes_values.txt); "details" would name them (not run: no device time left). Carry ["carry1", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
timeout 200 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi.txt 2>&1 || tail -3 /tmp/fi.txt
export PYTHONPATH=$PWD/build-py/python:$PWD/python:${PYTHONPATH:-}
el setup
timeout 200 ncu --clock-control base -k 'regex:prefill_sm90_kernel|PrefillWithKVCache' -c 4 \
  --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances values \
  python3 bench/compare.py --workload 1x32768 --methods mlakit,flashinfer_fa3 --iters 1 --warmup 0 --no-ceilings \
  --check-rows 8 --plan-iters 1 --overhead none > $OUT/ncu_opcodes.txt 2>&1
echo "ncu rc=$?"; el ncu
grep -E 'prefill_sm90_kernel|PrefillWithKVCache|sass__inst_executed_per_opcode|smsp__inst_executed.sum' $OUT/ncu_opcodes.txt | cut -c1-3000 | head -12
