#!/bin/bash
# Device call 3 of session 16: cuBLAS's workspace against the memset node before each large
# up-projection GEMM (call2's timeline: ~4-5 us of idle device time per layer around it). The
# graph-replayed MLA step (compare_mla, mlakit path only, N=100 and N=1 at budget 8192) with
# MLAKIT_CUBLAS_WORKSPACE_BYTES unset (32 MiB) and 0, alternated twice, each with a timeline.
# Python binding built on the device from the working tree. carry [".peers"] (not needed).
set -u
export MLAKIT_GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
mkdir -p /tmp/g
cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF \
  -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 &&
  cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1 || tail -5 /tmp/pyb.txt
el pybuild
export PYTHONPATH=$PWD/build-py/python:$PWD/python
for r in 1 2; do
  for ws in default 0; do
    n=ws_${ws}_r$r
    if [[ $ws == default ]]; then unset MLAKIT_CUBLAS_WORKSPACE_BYTES; else export MLAKIT_CUBLAS_WORKSPACE_BYTES=$ws; fi
    timeout 100 python3 bench/compare_mla.py --cases 100:8192,1:8192 --paths mlakit_step_graph --reps 3 \
      --timeline /tmp/g/timeline_$n.json --json /tmp/g/compare_mla_$n.json > /tmp/g/console_$n.txt 2>&1
    echo "== $n"; grep -E "total .* ms wall" /tmp/g/console_$n.txt | tail -2
    python3 bench/timeline_kernels.py /tmp/g/timeline_$n.json --top 7 > /tmp/g/timeline_kernels_$n.txt 2>&1
    head -9 /tmp/g/timeline_kernels_$n.txt
    gzip -f /tmp/g/timeline_$n.json
    el $n
  done
done
tar czf $OUT/g.tgz -C /tmp g; el done
