#!/bin/bash
set -u
export MLAKIT_GIT_COMMIT=7d37d7d
echo "== gpu tests + sanitizers (merged build)"
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry3/bld GPU_CHECK_STEPS=gpu-tests,sanitize timeout 330 scripts/gpu-check "$OUT" 2>&1 | tail -12
grep -E "^\[  FAILED" $OUT/tests.log | head -20
echo "== seed (C++ MLA step)"
timeout 100 carry3/bld/mlakit-bench seed --json "$OUT/seed.json" > "$OUT/seed.log" 2>&1; echo "seed rc=$?"
grep -E "^check|Mode|Requests|Token budget|Total step time, wall|Total step time, device|Host share of total" $OUT/seed.log | head -40
for b in bld pp pps; do
  echo "== bench $b"
  timeout 60 carry3/$b/mlakit-bench --kernel sm90 --all --iters 30 --no-check 2>&1 | grep -E "cuda:0|FAIL|rror"
done
