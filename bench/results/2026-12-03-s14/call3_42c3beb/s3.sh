#!/bin/bash
# Session 14, device call 3 (the late claim as the default, commit in carry6/COMMIT):
#  1. Python binding build in the background (build-py);
#  2. every sm90 GPU test (non-split and split in parallel) and compute-sanitizer memcheck,
#     racecheck, synccheck over the sm90 tests (gpu-check's filter less the slow split-range test),
#     all at once;
#  3. host-time probes of the graph-replayed MLA step (plan() / replay() after a GPU wait);
#  4. scripts/gpu-check flashinfer, compare, compare-mla (N=1, N=100 at budgets 8192 and 2048).
set -u
export MLAKIT_GIT_COMMIT=$(cat carry6/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { echo $(( 590 - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
( timeout 260 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j8 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt ) &
PB=$!
T=carry6/bin/mlakit_gpu_tests
mkdir -p /tmp/t
timeout 300 $T --gtest_filter='-*sm80*:*Split*' > /tmp/t/gpu_nosplit.log 2>&1 & A=$!
timeout 300 $T --gtest_filter='*Split*:-*sm80*' > /tmp/t/gpu_split.log 2>&1 & B=$!
SAN='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90_h16_16_d128r64v128_bf16_causal:BlockSizes/CudaMlaGatherOp.*:Shapes/CudaMlaStep.*/sm90_h16_bs16_*'
for tool in memcheck racecheck synccheck; do
  f="$SAN-*SplitKeyRanges*"
  [[ $tool == racecheck ]] && f="${SAN%:Shapes/CudaMlaStep*}-*SplitKeyRanges*"
  timeout 330 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$f" > /tmp/t/san_$tool.log 2>&1 &
  eval "S_$tool=\$!"
done
wait $A; echo "gpu tests (no split) rc=$?"; wait $B; echo "gpu tests (split) rc=$?"
for f in /tmp/t/gpu_nosplit.log /tmp/t/gpu_split.log; do grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|tests? from .* ran|^\[  FAILED  \] [A-Z]" $f | head -12; done
el gpu-tests
for tool in memcheck racecheck synccheck; do eval "wait \$S_$tool"; rc=$?; echo "sanitize $tool rc=$rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/t/san_$tool.log | tail -1) $(grep -E '^\[  PASSED' /tmp/t/san_$tool.log)"; done
el sanitize
tar czf $OUT/tests.tgz -C /tmp t
wait $PB; el pybuild; ls build-py/python | grep -c _mlakit
export PYTHONPATH=$PWD/build-py/python:$PWD/python
timeout 60 python3 bench/mla_graph_host_probe.py --reps 50 > /tmp/probe.txt 2>&1; cat /tmp/probe.txt
timeout 40 python3 bench/mla_plan_cost.py --after-sync --iters 60 >> /tmp/probe.txt 2>&1; tail -19 /tmp/probe.txt
cp /tmp/probe.txt $OUT/host_probe.txt; el probes
cp carry6/bin/mlakit-bench build-py/
mkdir -p /tmp/g /tmp/g2
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare-mla \
  COMPARE_MLA_ARGS="--cases 1:8192,100:8192,1:2048 --paths fa2_vllm,flashinfer_fa3,mlakit_step_graph --reps 7" \
  timeout $(( $(left) - 100 )) scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare-mla; grep -E "host per step|target" /tmp/g/console.txt | head -30
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout $(( $(left) - 8 )) scripts/gpu-check /tmp/g2 > /tmp/g2/console.txt 2>&1
el compare; cat /tmp/g2/summary.txt 2>/dev/null | head -40
tar czf $OUT/g.tgz -C /tmp g g2; el done
