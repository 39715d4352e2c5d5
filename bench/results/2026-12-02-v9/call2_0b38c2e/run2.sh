#!/usr/bin/env bash
# Device call 2: GPU tests + sanitizers (carried binaries), then key-range split on/off timings.
set -u
export MLAKIT_GIT_COMMIT=$(cat carry3/COMMIT)
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry3/bld GPU_CHECK_STEPS=gpu-tests,sanitize scripts/gpu-check $R > $R/console.txt 2>&1
echo "tests done $(( $(date +%s) - t0 )) s"; grep -E "tests:|sanitize|FAILED|overall" $R/console.txt | head -30
B=carry3/bld/mlakit-bench
{
for w in 1x999 8x999+200 100x999; do
  for s in auto on off; do
    echo "== $w kv-split $s"; $B --workload $w --device cuda --kv-split $s --iters 30 2>&1 | grep -E "^(workload|[0-9]+x)" | tail -2
  done
done
echo "== again 1x999"; for s in on off on off; do $B --workload 1x999 --device cuda --kv-split $s --iters 30 2>&1 | grep -E "^1x999" | tail -1; done
} > $R/split_bench.txt 2>&1
cat $R/split_bench.txt
echo "all done $(( $(date +%s) - t0 )) s"
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
