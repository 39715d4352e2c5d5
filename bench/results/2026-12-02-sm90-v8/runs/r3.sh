#!/bin/bash
set -u
echo "== gpu tests (new)"
timeout 300 carry3/new/mlakit_gpu_tests > $OUT/gpu_tests.log 2>&1; echo "rc=$?"
grep -E "^\[  FAILED|^\[  PASSED|tests ran|SKIPPED \]" $OUT/gpu_tests.log | head -20
grep -B2 -A8 "Failure" $OUT/gpu_tests.log | head -40
for r in 1 2; do for b in v1 g1 new; do
  echo "== bench $b round $r"
  timeout 90 carry3/$b/mlakit-bench --kernel sm90 --all --iters 30 $([ $r = 2 ] && echo --no-check) 2>&1 | grep -E "cuda:0|FAIL|rror"
done; done
