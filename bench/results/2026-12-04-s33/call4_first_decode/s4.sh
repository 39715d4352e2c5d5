#!/bin/bash
# Session 33 call 4: the first item's decode with a warp-wide run search and the tensor maps
# prefetched at the start (1eb8101). carry ["carry1"]: carry1/tests/* and
# carry1/ab/mlakit-bench-new at 1eb8101, carry1/ab/mlakit-bench-base at 1b0326b (the kernel before),
# carry1/ab/mlakit-bench-trace: 1eb8101 with -DMLAKIT_SM90_TRACE=1.
# 1. Every GPU test but the sm80 ones (the change is sm90's; 4 shards), the sanitizers (memcheck,
#    racecheck, synccheck) with gpu-check's filter.
# 2. Block timelines of the new build on 1x999, 8x999+200, the N=100 step-1 shape and 100x999,
#    against call 1's. Prediction: block start -> first item taken 1.86 / 2.78 / 2.59 / 3.65 us
#    (call 1) -> ~1.7 / ~2.0 / ~1.9 / ~2.3 us (binary-search levels 0 / 4 / 4 / 7 -> 0-1 / 1 / 1 /
#    2 loads), and taken -> Q,K landed a little shorter (descriptors prefetched).
# 3. A/B base against new, alternated processes: the named workloads (3 rounds), the step-1 shape
#    (5 rounds), the C++ seed step (2 rounds). Prediction: 8x999+200 and the step-1 launch +0.8-1%,
#    1x999 +0-2%, 100x999 +0.1%, long work level; the seed step -0.3 to -0.5%.
set -u
export MLAKIT_GIT_COMMIT=${RUN_COMMIT:?set RUN_COMMIT}
source bench/device_env.sh
MLAKIT_SKIP_BUILD=1 MLAKIT_BUILD_DIR=carry1 GPU_CHECK_STEPS=gpu-tests,sanitize GPU_TEST_SHARDS=4 \
  GPU_TEST_FILTER='-*sm80*' timeout 330 scripts/gpu-check $OUT/check > /tmp/check.txt 2>&1
echo "gpu-check rc=$?"
grep -E "gpu-tests|sanitize|ERROR SUMMARY|RACECHECK|FAILED" $OUT/check/summary.txt | head -12
rm -f $OUT/check/build.log
el check
mkdir -p /tmp/tr
{
  for spec in "one_1x999 --workload 1x999" "s0_8x999+200 --workload 8x999+200" \
      "s1_step1 --lens 799,7x999,400 --kv-lens 999,7x999,400 --causal --heads 16" "big_100x999 --workload 100x999"; do
    set -- $spec; n=$1; shift
    MLAKIT_SM90_TRACE_FILE=/tmp/tr/$n timeout 60 carry1/ab/mlakit-bench-trace --kernel sm90 "$@" --iters 5 --no-check 2>&1 | grep cuda:0
  done
  python3 - <<'PY'
import statistics as st, sys
sys.path.insert(0, "bench")
from sm90_trace import read_trace
for f in ["one_1x999", "s0_8x999+200", "s1_step1", "big_100x999"]:
    blocks, items = read_trace(f"/tmp/tr/{f}.d192_bf16.txt")
    first = {}
    for it in items:
        if it["b"] not in first or it["t0"] < first[it["b"]]["t0"]:
            first[it["b"]] = it
    d = [(first[b]["t0"] - blocks[b][0]) / 1e3 for b in first]
    qk = [(first[b]["tqk"] - first[b]["t0"]) / 1e3 for b in first if first[b]["tqk"] > 0]
    s0 = [(first[b]["ts"] - first[b]["t0"]) / 1e3 for b in first]
    print(f, "start->first taken us: min %.2f med %.2f max %.2f" % (min(d), st.median(d), max(d)),
          "| taken->Q,K landed med %.2f, ->S0 med %.2f" % (st.median(qk), st.median(s0)))
PY
  for f in /tmp/tr/*.txt; do echo "== $f"; python3 bench/sm90_trace.py "$f" | head -4; done
} > $OUT/trace.txt 2>&1
cat $OUT/trace.txt | grep -E "start->|launch|items .*before"
el trace
{
  ab_rounds /tmp/ab_named.txt 3 carry1/ab/mlakit-bench-base carry1/ab/mlakit-bench-new
  echo "== step 1 at budget 8192 (799+200 ctx, 7x999, 400)"
  ab_rounds /tmp/ab_s8192.txt 5 carry1/ab/mlakit-bench-base carry1/ab/mlakit-bench-new -- --kernel sm90 --lens 799,7x999,400 --kv-lens 999,7x999,400 --causal --heads 16 --iters 30 --no-check
} > $OUT/ab.txt 2>&1
cat $OUT/ab.txt
cat /tmp/ab_named.txt /tmp/ab_s8192.txt > $OUT/ab_rows.txt
el ab
for r in 1 2; do
  for b in base new; do
    echo "== round $r $b"
    timeout 120 carry1/ab/mlakit-bench-$b seed --requests 100 --budgets 8192,2048 --modes graph --reps 3 --no-check 2>&1 |
      grep -E "^(Token budget|Total step time, wall)"
    timeout 60 carry1/ab/mlakit-bench-$b seed --requests 1 --budgets 8192 --modes graph --reps 5 --no-check 2>&1 |
      grep -E "^(Total step time, wall|Total step time, device)"
  done
done > $OUT/seed_ab.txt 2>&1
cat $OUT/seed_ab.txt
el seed
