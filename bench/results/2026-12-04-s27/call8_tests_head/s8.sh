#!/bin/bash
# Session 27, call 8: the shipped cleanup's kernel (3cde27a; HEAD's kernel source is the same):
# the sm90 GPU tests of the (192, 128) shape, graphs, batch invariance and the MLA step, with the
# last of the session's device time (call 3 ran the full set on a build that also had the
# V-cleared fold).
set -u
source bench/device_env.sh
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_*:Kernels/CudaGraph*/sm90:*BatchInvariant*/sm90:Shapes/CudaMlaStep.*/sm90*:Upload/CudaMlaGraph.*'
timeout 170 carry1/tests-s27 --gtest_filter="$F" > $OUT/gpu_s27.log 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|^\[  FAILED  \] [A-Z]" $OUT/gpu_s27.log | head -12
el done
