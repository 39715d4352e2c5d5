#!/bin/bash
# Session 12, device call 3 (commit in carry4/COMMIT, v10): GPU tests (all but the sm80
# instantiations, whose kernel did not change); memcheck / racecheck / synccheck over the sm90
# tests that reach the new epilogue; bench of v10 against v10 + ping-pong and v10 + Q per box;
# compare.py beside the peers (numbers of record).
set -u
export MLAKIT_GIT_COMMIT=$(cat carry4/COMMIT)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
T=carry4/bld/tests/mlakit_gpu_tests
timeout 150 $T --gtest_filter='-*sm80*' > $OUT/gpu_tests.log 2>&1; echo "gpu tests rc=$?"
grep -E "^\[  (FAILED|PASSED) |tests ran|SKIPPED \]" $OUT/gpu_tests.log | tail -12; el tests
F='KernelsHeadDimsAndTypes/CudaPrefill.StridedOutputView/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:KernelsHeadDimsAndTypes/CudaPrefill.LengthsAroundEveryTileBoundary/sm90_d192x128_bf16:KernelsHeadDimsAndTypes/CudaPrefill.SplitKeyRangesMatchUnsplitPlans/sm90_d192x128_bf16'
for tool in memcheck racecheck synccheck; do
  timeout 55 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="$F" > /tmp/$tool.txt 2>&1; echo "$tool rc=$?"
  { echo "== $tool"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|tests ran|PASSED  \]|FAILED  \]|^\[       OK" /tmp/$tool.txt; } >> $OUT/san.txt; el $tool
done
tail -20 $OUT/san.txt
{ for b in tma pp qb tma; do echo "== bench $b"; timeout 30 carry4/$b/mlakit-bench --kernel sm90 --workload 8x999+200 --workload 100x999 --workload 1x16384 --iters 30 2>&1 | grep -E "cuda:0"; done; } > $OUT/variants.txt 2>&1
cat $OUT/variants.txt; el variants
timeout 40 bash -c 'cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j16 >> /tmp/pyb.txt 2>&1' || tail -20 /tmp/pyb.txt
cp carry4/tma/mlakit-bench build-py/; el pybuild
mkdir -p /tmp/g
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" timeout 150 scripts/gpu-check /tmp/g > /tmp/g/console.txt 2>&1
el compare; cat /tmp/g/summary.txt 2>/dev/null | head -40
tar czf $OUT/g.tgz -C /tmp g
