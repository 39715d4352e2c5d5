#!/bin/bash
set -u
echo "== gpu tests sm90 (early)"
timeout 200 carry3/early/tests/mlakit_gpu_tests --gtest_filter='*sm90*:*Mla*' > $OUT/gpu_tests_early.log 2>&1; echo "rc=$?"
grep -E "^\[  FAILED|^\[  PASSED|tests ran" $OUT/gpu_tests_early.log | head -10
for r in 1 2; do for b in bld early g8; do
  echo "== bench $b round $r"
  timeout 60 carry3/$b/mlakit-bench --kernel sm90 --all --iters 30 $([ $r = 2 ] && echo --no-check) 2>&1 | grep -E "cuda:0|FAIL|rror" | awk '{print $1, $6, $7, $NF}'
done; done
