#!/bin/bash
# Device call 4 of session 16: cuBLAS workspace 32 MiB (default) against 0 in the C++ seed step
# (mlakit-bench seed, graph mode, N=100, budgets 8192 and 2048), DeepSeek-Coder-V2-Lite (16 heads)
# and DeepSeek-V3's 128 heads (the GEMM 8x wider), alternated twice; first the MLA GPU tests with no
# workspace. carry ["carry12"] (mlakit-bench, tests/mlakit_gpu_tests of the commit in COMMIT).
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
mkdir -p /tmp/g; B=carry12/mlakit-bench
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
# The MLA GPU tests (eager, graph capture + replay after re-plan, StreamGraph) with no cuBLAS workspace.
MLAKIT_CUBLAS_WORKSPACE_BYTES=0 timeout 150 carry12/mlakit_gpu_tests --gtest_filter='*Mla*:CudaStreamGraph.*' > /tmp/g/gpu_tests_mla_ws0.log 2>&1
echo "mla gpu tests, workspace 0: rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" /tmp/g/gpu_tests_mla_ws0.log | head
el tests
for h in 16 128; do
  for r in 1 2; do
    for ws in default 0; do
      n=h${h}_ws_${ws}_r$r
      if [[ $ws == default ]]; then unset MLAKIT_CUBLAS_WORKSPACE_BYTES; else export MLAKIT_CUBLAS_WORKSPACE_BYTES=$ws; fi
      timeout 120 $B seed --requests 100 --budgets 8192,2048 --modes graph --heads $h --reps 3 --no-check \
        --json /tmp/g/seed_$n.json > /tmp/g/seed_$n.txt 2>&1
      echo "== $n: $(grep -E 'Total step time, (wall|device)' /tmp/g/seed_$n.txt | awk '{print $NF}' | tr '\n' ' ')"
      el $n
    done
  done
done
tar czf $OUT/g.tgz -C /tmp g; el done
