#!/bin/bash
# Builds, on a CPU machine, what s1.sh - s3.sh carry (carry ["carry1"], 51 MB):
#   carry1/ab/v20   mlakit-bench of main's kernel (v20, bd26b09)
#   carry1/ab/v21   v21 (42f70f9: no-mask tiles found once per item, predicated arrives)
#   carry1/ab/v22   v22 (6d8c147: + the masked softmax by visibility bits, both kernels)
#   carry1/ab/v23   v23 (a8b41ff: + the wgmma descriptors built once per kernel)
#   carry1/ab/v24   v24 (branch s36-v22-mask-bits, 14cfac4: + an item's first P V overwrites O)
#   carry1/tests/mlakit_gpu_tests       v24's GPU tests
#   carry1/tests_v22/, tests_v21/       v22's and v21's, to find the change that broke a test
#   carry1/COMMIT   the v24 commit
# Each revision builds in its own git worktree under /tmp, so the checkout is left as it is.
#   bench/results/2026-12-04-s36/prepared_v24/prepare_carry.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
V24=s36-v22-mask-bits
build() {  # build REV NAME TARGETS...
  local rev=$1 name=$2 wt=/tmp/mlakit-wt-$2
  shift 2
  rm -rf "$wt"; git worktree prune
  git worktree add -q --detach "$wt" "$rev"
  cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON \
    -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_PYTHON=OFF > "$wt/cmake.log"
  ninja -C "$wt/build" "$@" > "$wt/ninja.log"
}
rm -rf carry1; mkdir -p carry1/ab carry1/tests carry1/tests_v22 carry1/tests_v21
build bd26b09 v20 mlakit-bench
cp /tmp/mlakit-wt-v20/build/mlakit-bench carry1/ab/v20
for pair in 42f70f9:v21 6d8c147:v22 a8b41ff:v23 "$V24":v24; do
  rev=${pair%%:*} name=${pair##*:}
  build "$rev" "$name" mlakit-bench
  cp /tmp/mlakit-wt-$name/build/mlakit-bench carry1/ab/$name
done
# GPU tests only where they are carried (v23's are not: s1.sh bisects v24 -> v22 -> v21).
for dir in tests:v24 tests_v22:v22 tests_v21:v21; do
  name=${dir##*:}
  ninja -C /tmp/mlakit-wt-$name/build mlakit_gpu_tests >> /tmp/mlakit-wt-$name/ninja.log
  cp /tmp/mlakit-wt-$name/build/tests/mlakit_gpu_tests carry1/${dir%%:*}/
done
git rev-parse --short "$V24" > carry1/COMMIT
for n in v20 v21 v22 v23 v24; do git worktree remove --force /tmp/mlakit-wt-$n; done
du -sh carry1; ls -la carry1/ab carry1/tests*; cat carry1/COMMIT
