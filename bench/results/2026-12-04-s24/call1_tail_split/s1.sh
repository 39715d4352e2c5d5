#!/bin/bash
# Device call 1 of session 24, at the commit in carry1/COMMIT (e5b85c2: the tail rule, kAuto).
#  1. every GPU test (the new TailSplitOfALongNonCausalSequenceMatchesUnsplit included), and
#     compute-sanitizer memcheck / racecheck / synccheck over the sm90 split tests, while the
#     Python binding builds;
#  2. A/B in one process: 1x32768 with the tail rule (--kv-split auto) and without (off),
#     interleaved, three rounds, --warmup-ms 200 and 0. Prediction: 32 rounds of items -> 31.5,
#     -1.6% time (the block timelines put 1x32768's tail at 3.0%); the other named workloads do
#     not split (unchanged);
#  3. the record: scripts/gpu-check steps flashinfer,compare (compare.py, every method);
#  4. compare.py 1x32768 with mlakit, mlakit_nosplit and flashinfer_fa3, three passes.
# Run from the repository root with carry ["carry1", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
mkdir -p /tmp/t; T=carry1/mlakit_gpu_tests
timeout 400 $T > /tmp/t/gpu_all.log 2>&1 & A=$!
F='KernelsHeadDimsAndTypes/CudaPrefill.TailSplit*/sm90_*:KernelsHeadDimsAndTypes/CudaPrefill.Split*/sm90_d192x128_bf16:Kernels/CudaScale.BatchInvariantBitwise/sm90'
declare -A P
for tool in memcheck racecheck synccheck; do
  timeout 400 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$F" > /tmp/t/$tool.log 2>&1 & P[$tool]=$!
done
timeout 200 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j8 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
wait $A; echo "all GPU tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" /tmp/t/gpu_all.log | head -12
grep -E "tail split" /tmp/t/gpu_all.log | head -8
for tool in memcheck racecheck synccheck; do
  wait ${P[$tool]}; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/t/$tool.log | tail -1), $(grep -cE '^\[       OK \]' /tmp/t/$tool.log) tests OK"
done
el tests
cp /tmp/t/*.log $OUT/
for wu in 200 0; do
  for r in 1 2 3; do
    for s in auto off; do
      timeout 60 carry1/mb --kernel sm90 --workload 1x32768 --workload ctx_8x1024_vs_4096 --kv-split $s --iters 20 --warmup-ms $wu --no-check 2>&1 \
        | grep "cuda:0/" | awk -v s=$s -v r=$r -v wu=$wu '{print "warmup-ms " wu, "split-" s, "r" r, $0}'
    done
  done
done > $OUT/ab_tail.txt 2>&1
cat $OUT/ab_tail.txt; el ab
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout 300 scripts/gpu-check $OUT/record > /tmp/gc.txt 2>&1; echo "gpu-check rc=$?"
tail -3 /tmp/gc.txt; cat $OUT/record/summary.txt 2>/dev/null | head -40
el record
FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi.txt 2>&1 || tail -3 /tmp/fi.txt
export PYTHONPATH=$PWD/build-py/python:$PWD/python:${PYTHONPATH:-}
for r in 1 2 3; do
  timeout 100 python3 bench/compare.py --workload 1x32768 --methods mlakit,mlakit_nosplit,flashinfer_fa3 --overhead none \
    --no-ceilings --plan-iters 5 2>&1 | grep -E '^1x32768 ' | awk -v r=$r '{print "pass " r, $0}'
done > $OUT/compare_1x32768_ab.txt
cat $OUT/compare_1x32768_ab.txt; el done
