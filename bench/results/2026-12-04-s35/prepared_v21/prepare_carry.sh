#!/bin/bash
# Builds, on a CPU machine, what s1.sh and s2.sh carry (carry ["carry1"]):
#   carry1/ab/v20   mlakit-bench of main as this session left it (kernel v20, bd26b09)
#   carry1/ab/v21   mlakit-bench of the v21 candidate (branch s35-v21-full-tiles)
#   carry1/ab/v21s  v21 with v21s_sbase_broadcast.patch (the consumers' shared-memory base passed
#                   through a shuffle, after which ptxas keeps it in a uniform register instead of
#                   recomputing it from SR_CgaCtaId at the kv loop's head)
#   carry1/tests/mlakit_gpu_tests   v21's GPU tests
#   carry1/COMMIT   the v21 commit
# Each revision builds in its own git worktree under /tmp, so the checkout is left as it is.
#   bench/results/2026-12-04-s35/prepared_v21/prepare_carry.sh [V20_REV] [V21_REV]
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
V20=${1:-bd26b09}
V21=${2:-s35-v21-full-tiles}
build() {  # build REV NAME TARGETS...
  local rev=$1 name=$2 wt=/tmp/mlakit-wt-$2
  shift 2
  rm -rf "$wt"; git worktree prune
  git worktree add -q --detach "$wt" "$rev"
  cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON \
    -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_PYTHON=OFF > "$wt/cmake.log"
  ninja -C "$wt/build" "$@" > "$wt/ninja.log"
}
mkdir -p carry1/ab carry1/tests
build "$V20" v20 mlakit-bench
cp /tmp/mlakit-wt-v20/build/mlakit-bench carry1/ab/v20
build "$V21" v21 mlakit-bench mlakit_gpu_tests
cp /tmp/mlakit-wt-v21/build/mlakit-bench carry1/ab/v21
cp /tmp/mlakit-wt-v21/build/tests/mlakit_gpu_tests carry1/tests/
git -C /tmp/mlakit-wt-v21 apply "$PWD/bench/results/2026-12-04-s35/prepared_v21/v21s_sbase_broadcast.patch"
ninja -C /tmp/mlakit-wt-v21/build mlakit-bench > /tmp/mlakit-wt-v21/ninja-v21s.log
cp /tmp/mlakit-wt-v21/build/mlakit-bench carry1/ab/v21s
git rev-parse --short "$V21" > carry1/COMMIT
for n in v20 v21; do git worktree remove --force /tmp/mlakit-wt-$n; done
ls -la carry1/ab carry1/tests; cat carry1/COMMIT
