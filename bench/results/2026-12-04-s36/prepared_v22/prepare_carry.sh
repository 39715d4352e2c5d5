#!/bin/bash
# Builds, on a CPU machine, what s1.sh - s3.sh carry (carry ["carry1"]):
#   carry1/ab/v20   mlakit-bench of main's kernel (v20, bd26b09)
#   carry1/ab/v21   the v21 candidate (99caae6: no-mask tiles found once per item, predicated arrives)
#   carry1/ab/v22   the v22 candidate (branch s36-v22-mask-bits: v21, the wide-window GPU test, and
#                   the masked softmax by visibility bits)
#   carry1/ab/v22s  v22 with session 35's sbase patch (the consumers' shared-memory base through a
#                   shuffle, so ptxas keeps it out of the kv loop)
#   carry1/tests/mlakit_gpu_tests       v22's GPU tests
#   carry1/tests_v21/mlakit_gpu_tests   v21's (42f70f9), to tell the two changes apart if v22's fail
#   carry1/COMMIT   the v22 commit
# Each revision builds in its own git worktree under /tmp, so the checkout is left as it is.
#   bench/results/2026-12-04-s36/prepared_v22/prepare_carry.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
PATCH=$PWD/bench/results/2026-12-04-s35/prepared_v21/v21s_sbase_broadcast.patch
V22=s36-v22-mask-bits
build() {  # build REV NAME TARGETS...
  local rev=$1 name=$2 wt=/tmp/mlakit-wt-$2
  shift 2
  rm -rf "$wt"; git worktree prune
  git worktree add -q --detach "$wt" "$rev"
  cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_CUDA=ON \
    -DMLAKIT_CUDA_ARCHS=90a -DMLAKIT_BUILD_PYTHON=OFF > "$wt/cmake.log"
  ninja -C "$wt/build" "$@" > "$wt/ninja.log"
}
rm -rf carry1; mkdir -p carry1/ab carry1/tests carry1/tests_v21
build bd26b09 v20 mlakit-bench
cp /tmp/mlakit-wt-v20/build/mlakit-bench carry1/ab/v20
build 42f70f9 v21 mlakit-bench mlakit_gpu_tests
cp /tmp/mlakit-wt-v21/build/mlakit-bench carry1/ab/v21
cp /tmp/mlakit-wt-v21/build/tests/mlakit_gpu_tests carry1/tests_v21/
build "$V22" v22 mlakit-bench mlakit_gpu_tests
cp /tmp/mlakit-wt-v22/build/mlakit-bench carry1/ab/v22
cp /tmp/mlakit-wt-v22/build/tests/mlakit_gpu_tests carry1/tests/
git -C /tmp/mlakit-wt-v22 apply "$PATCH"
ninja -C /tmp/mlakit-wt-v22/build mlakit-bench > /tmp/mlakit-wt-v22/ninja-v22s.log
cp /tmp/mlakit-wt-v22/build/mlakit-bench carry1/ab/v22s
git rev-parse --short "$V22" > carry1/COMMIT
for n in v20 v21 v22; do git worktree remove --force /tmp/mlakit-wt-$n; done
du -sh carry1; ls -la carry1/ab carry1/tests carry1/tests_v21; cat carry1/COMMIT
