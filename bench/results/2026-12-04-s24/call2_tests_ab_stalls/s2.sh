#!/bin/bash
# Device call 2 of session 24, at carry1/COMMIT (the tail rule; call 1's full GPU test run hit
# its time limit inside the new test, which is now sm90-only and cheaper):
#  1. every GPU test; memcheck / racecheck / synccheck over the new tail-split test; the Python
#     binding builds meanwhile;
#  2. v16b (3a02d73, carry1/mb-v16b) against the tail rule build (carry1/mb) on 1x999, 8x999+200,
#     100x999 and 1x32768, three rounds interleaved: call 1's record read 1x999 at 0.037 ms
#     (0.024-0.030 in session 23) with fa3 slower by the same factor; prediction: the two builds
#     equal within 1% except 1x32768 (tail rule: -0.5 to -1.5%);
#  3. session 23's prepared stall sampling (s8.sh step 2): ncu SourceCounters + WarpStateStats,
#     clocks locked, one 1x32768 launch of mlakit and of FlashInfer fa3, bench/ncu_stalls.py.
# Run from the repository root with carry ["carry1", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
mkdir -p /tmp/t; T=carry1/mlakit_gpu_tests
timeout 420 $T > /tmp/t/gpu_all.log 2>&1 & A=$!
F='KernelsHeadDimsAndTypes/CudaPrefill.TailSplit*/sm90_*'
declare -A P
for tool in memcheck racecheck synccheck; do
  timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$F" > /tmp/t/$tool.log 2>&1 & P[$tool]=$!
done
timeout 200 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j8 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi.txt 2>&1 || tail -3 /tmp/fi.txt
export PYTHONPATH=$PWD/build-py/python:$PWD/python:${PYTHONPATH:-}
el pybuild
for tool in memcheck racecheck synccheck; do
  wait ${P[$tool]}; echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/t/$tool.log | tail -1), $(grep -cE '^\[       OK \]' /tmp/t/$tool.log) tests OK"
done
wait $A; echo "all GPU tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]|tests ran" /tmp/t/gpu_all.log | head -12
el tests
cp /tmp/t/*.log $OUT/
for r in 1 2 3; do
  for b in v16b tail; do
    bin=carry1/mb; [[ $b == v16b ]] && bin=carry1/mb-v16b
    timeout 60 $bin --kernel sm90 --workload 1x999 --workload 8x999+200 --workload 100x999 --workload 1x32768 \
      --iters 20 --warmup-ms 0 --no-check 2>&1 | grep "cuda:0/" | awk -v b=$b -v r=$r '{print b, "r" r, $0}'
  done
done > $OUT/ab_v16b_tail.txt 2>&1
cat $OUT/ab_v16b_tail.txt; el ab
ARGS="--workload 1x32768 --methods mlakit,flashinfer_fa3 --iters 1 --warmup 0 --no-ceilings --check-rows 8 --plan-iters 1 --overhead none"
timeout 200 ncu --clock-control base -k 'regex:prefill_sm90_kernel|PrefillWithKVCache' -c 2 --section SourceCounters \
  --section WarpStateStats -o /tmp/stalls python3 bench/compare.py $ARGS > /tmp/ncu_stalls_run.txt 2>&1
echo "ncu rc=$?"; tail -3 /tmp/ncu_stalls_run.txt
for k in prefill_sm90_kernel PrefillWithKVCache; do
  ncu -i /tmp/stalls.ncu-rep -k "regex:$k" --launch-count 1 --page source --print-source sass --csv \
    > /tmp/src_$k.csv 2>/dev/null && python3 bench/ncu_stalls.py /tmp/src_$k.csv 40 > $OUT/stalls_$k.txt
  head -30 $OUT/stalls_$k.txt
done
ncu -i /tmp/stalls.ncu-rep --page details --section WarpStateStats > $OUT/warp_states.txt 2>&1
el done
