#!/bin/bash
# Session 25 call 2: the row max in 4 partials per row (tree) against HEAD (base).
# Why: the SASS shows each row's max as one chain of 32 dependent FMNMX per kv tile on the
# softmax's critical path (session 18: the tile's period exceeds its tensor work by the softmax
# chain). The tree cuts it to 8 + 2. Max is exact: same bits, so every bitwise test still holds.
# Prediction: +1-3% on long work and the ragged batches (less under the power cap).
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader
F='KernelsHeadDimsAndTypes/CudaPrefill.*:Kernels/CudaScale.*:Shapes/CudaSplitK.*:Kernels/CudaGraph*:*Invarian*'
timeout 330 carry1/tests-tree --gtest_filter="$F" > $OUT/gpu_tree.log 2>&1; echo "tree tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \] [A-Z]|tests ran" $OUT/gpu_tree.log | head
el tree-tests
timeout 60 carry1/tests-base --gtest_filter='*BatchInvariantBitwiseTailSplit*' > $OUT/gpu_base_tail.log 2>&1; echo "base tail-split invariance rc=$?"; grep -E "OK|FAILED|PASSED" $OUT/gpu_base_tail.log | head -4
for r in 1 2 3 4 5; do
  for b in base tree; do
    timeout 100 carry1/mb-$b --kernel sm90 --all --iters 20 --warmup-ms 0 --no-check 2>&1 | grep "cuda:0/" \
      | awk -v b=$b -v r=$r '{print b, "r" r, $0}'
  done
done > $OUT/ab_tree.txt 2>&1
for w in $(awk '{print $3}' $OUT/ab_tree.txt | sort -u); do
  for b in base tree; do echo "$w $b $(grep "^$b r. $w " $OUT/ab_tree.txt | awk '{print $8}' | sort -n | tr '\n' ' ')"; done
done
el ab
timeout 60 carry1/mb-tree --kernel sm80 --all --iters 10 --warmup-ms 0 2>&1 | grep -E "cuda:0/|FAIL" | awk '{print "sm80 tree", $3, $7, $8, $NF}'
timeout 60 carry1/mb-base --kernel sm80 --all --iters 10 --warmup-ms 0 --no-check 2>&1 | grep -E "cuda:0/" | awk '{print "sm80 base", $3, $7, $8}'
el done
