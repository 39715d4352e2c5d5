#!/bin/bash
# Device call 3 of session 24, at carry1/COMMIT (b3a6090: the halves-last decode without extra
# divisions):
#  1. the sm90 kernel's GPU tests (prefill suite, scale suite with 64k tokens / 1000 sequences /
#     64-bit offsets / batch invariance, split K, graphs) while the Python binding builds;
#  2. A/B of three builds, five rounds interleaved: v16b (3a02d73), tail1 (e5b85c2: call 2 read it
#     0.5-0.7% under v16b on the ragged causal batches) and tail2 (b3a6090). Prediction: tail2 =
#     v16b within 0.3% on 1x999 / 8x999+200 / 100x999; on 1x32768 tail1 = tail2, both 0.5-1.5%
#     ahead of v16b;
#  3. the record at b3a6090: scripts/gpu-check steps flashinfer,compare.
# Run from the repository root with carry ["carry1", ".peers"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
mkdir -p /tmp/t; T=carry1/mlakit_gpu_tests
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_*:Kernels/CudaScale.*/sm90*:Shapes/CudaSplitK.*/sm90*:Kernels/CudaGraph*/sm90:*Invarian*'
timeout 300 $T --gtest_filter="$F" > /tmp/t/gpu_sm90.log 2>&1 & A=$!
timeout 200 bash -c "cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3) > /tmp/pyb.txt 2>&1 && cmake --build build-py -j8 >> /tmp/pyb.txt 2>&1" || tail -5 /tmp/pyb.txt
el pybuild
wait $A; echo "sm90 GPU tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]|tests ran|tail split" /tmp/t/gpu_sm90.log | head -12
cp /tmp/t/gpu_sm90.log $OUT/
el tests
for r in 1 2 3 4 5; do
  for b in v16b tail1 tail2; do
    bin=carry1/mb; [[ $b == v16b ]] && bin=carry1/mb-v16b; [[ $b == tail1 ]] && bin=carry1/mb-tail1
    timeout 60 $bin --kernel sm90 --workload 1x999 --workload 8x999+200 --workload 100x999 --workload 1x32768 \
      --iters 20 --warmup-ms 0 --no-check 2>&1 | grep "cuda:0/" | awk -v b=$b -v r=$r '{print b, "r" r, $0}'
  done
done > $OUT/ab_decode.txt 2>&1
for w in 1x999 8x999+200 100x999 1x32768; do
  for b in v16b tail1 tail2; do
    echo "$w $b $(grep "^$b r. $w " $OUT/ab_decode.txt | awk '{printf "%s ", $9}')"
  done
done; el ab
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=build-py GPU_CHECK_STEPS=flashinfer,compare COMPARE_ARGS="--overhead none" \
  timeout 300 scripts/gpu-check $OUT/record > /tmp/gc.txt 2>&1; echo "gpu-check rc=$?"
rm -f $OUT/record/tests.log $OUT/record/build.log
grep -E '^\s+compare ' $OUT/record/summary.txt
sed -n '/^| workload | mlakit ms/,/^$/p' $OUT/record/summary.txt
el done
