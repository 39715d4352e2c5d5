#!/bin/bash
# Device call 2 of session 22: torch tensors read through PyTorch's DLPack exchange table and
# run() allocating out in the extension (the working tree, built here). Prediction: run(q,k,v)'s
# host time 17.5-20 us -> ~9-11 us on this host, compare.py's 1x999 interval 0.041 -> ~0.033 ms
# (the GPU still waits for the host: two event records are ~22 us of every iteration); the
# exchange off (MLAKIT_TORCH_EXCHANGE=0) gives the old path for the A/B. Also: key-range
# splitting at v15 on 1x999 (v9 measured it 40% slower; never re-measured since), and the GPU
# Python tests (stream from the table, graphs). Run with carry [".peers", "carry1"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
D=bench/results/2026-12-03-s22
timeout 170 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1" || { tail -5 /tmp/pyb.txt; }
el pybuild
FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi.txt 2>&1 || tail -5 /tmp/fi.txt
el flashinfer
export PYTHONPATH="$PWD/build-py/python:$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import torch, mlakit, mlakit.torch; print('torch', torch.__version__, 'exchange table in use:', mlakit._C._torch_exchange_in_use())"
for e in 1 0; do
  echo "== MLAKIT_TORCH_EXCHANGE=$e"
  MLAKIT_TORCH_EXCHANGE=$e TAG=exch$e timeout 100 python3 $D/call1_loop_cost/loop_cost.py 2>&1 | grep -v Warning | tail -8
  el exch$e
done
for e in 1 0; do
  echo "== compare.py, MLAKIT_TORCH_EXCHANGE=$e"
  MLAKIT_TORCH_EXCHANGE=$e timeout 120 python3 bench/compare.py --workload 1x999 --workload ctx_799_vs_200 \
    --methods mlakit,flashinfer_fa3,sdpa_cudnn --overhead none --no-ceilings --plan-iters 5 \
    --json $OUT/compare_exch$e.json 2>&1 | grep -E "^(1x999|ctx_799)" | head -8
  el compare$e
done
echo "== kv split at v15 (mlakit-bench, C++: the kernel alone)"
for s in off on off on; do
  timeout 60 carry1/mlakit-bench --kernel sm90 --lens 1x999 --causal --heads 16 --kv-split $s --iters 50 2>&1 | grep -E "cuda:0/" | sed "s/^/split $s: /"
  timeout 60 carry1/mlakit-bench --kernel sm90 --lens 2x999 --causal --heads 16 --kv-split $s --iters 50 2>&1 | grep -E "cuda:0/" | sed "s/^/split $s: /"
done
el split
echo "== GPU Python tests"
timeout 200 python3 -m pytest -q -x python/tests/test_gpu_torch.py python/tests/test_gpu_varlen.py python/tests/test_gpu_mla_torch.py python/tests/test_torch_exchange_cpu.py 2>&1 | tail -5
el pytest
