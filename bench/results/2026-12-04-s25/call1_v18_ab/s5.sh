#!/bin/bash
# Prepared in session 24 for the next session (its device time ran out): v18, the kv loop split
# in two (v18_plain_loop.patch on b3a6090 or later).
#
# Why: ncu stall sampling of one 1x32768 launch at locked clocks (session 24 calls 2 and 4):
#   mlakit no_inst 2.3%, branch_resolving 3.5% of samples; fa3 0.9% and 1.2%.
# mlakit's SASS takes three branches per kv tile into code 24-41 KB apart: loop head, then the
# softmax variant, then the back edge. fa3's loop is one 8 KB block.
# v18 runs a warpgroup's fully visible tiles (no soft cap, no window) in a loop of their own. That
# loop holds one softmax variant and is one contiguous 9 KB block with one back edge. The other
# tiles run in the old loop.
# Consumer 7388 -> 7992 instructions, 40 -> 60 HGMMA, no spills.
# Prediction: +1-3% on the long work (1x32768, 1x16384, ctx 8x1024/4096, H=128); the ragged
# batches within +-1% (the larger consumer against fewer branches).
#
# Before the call, here (CPU machine):
#   git worktree add /tmp/v18 HEAD && (cd /tmp/v18 && git apply <this folder>/v18_plain_loop.patch)
#   build both (cmake -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_PYTHON=OFF; ninja mlakit-bench mlakit_gpu_tests)
#   carry1/mb-base, carry1/mb-v18, carry1/tests-v18 (stripped), carry1/COMMIT
# Run from the repository root with carry ["carry1"].
set -u
source bench/device_env.sh  # el (binding / flashinfer not needed here)
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_*:Kernels/CudaScale.*/sm90*:Shapes/CudaSplitK.*/sm90*:Kernels/CudaGraph*/sm90:*Invarian*'
timeout 300 carry1/tests-v18 --gtest_filter="$F" > $OUT/gpu_sm90_v18.log 2>&1; echo "v18 sm90 tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]" $OUT/gpu_sm90_v18.log | head
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 carry1/tests-v18 \
  --gtest_filter='KernelsHeadDimsAndTypes/CudaPrefill.RaggedLengths*/sm90_d192x128_bf16:KernelsHeadDimsAndTypes/CudaPrefill.Split*/sm90_d192x128_bf16' \
  > /tmp/rc.log 2>&1; echo "racecheck rc=$?: $(grep 'RACECHECK SUMMARY' /tmp/rc.log)"
el tests
for r in 1 2 3 4 5; do
  for b in base v18; do
    timeout 100 carry1/mb-$b --kernel sm90 --all --iters 20 --warmup-ms 0 --no-check 2>&1 | grep "cuda:0/" \
      | awk -v b=$b -v r=$r '{print b, "r" r, $0}'
  done
done > $OUT/ab_v18.txt 2>&1
for w in $(awk '{print $3}' $OUT/ab_v18.txt | sort -u); do
  for b in base v18; do echo "$w $b $(grep "^$b r. $w " $OUT/ab_v18.txt | awk '{print $8}' | sort -n | tr '\n' ' ')"; done
done
el done
