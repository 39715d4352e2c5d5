# Session 28 call 2: the tuned up-projection GEMM (cuBLASLt, candidates timed at MlaStep creation).
# carry1/mb27 = mlakit-bench at c09a0e8 (cublasGemmEx), carry1/mb28 = the working tree (tuned),
# carry1/tests28 = its GPU tests.
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
el "GPU tests: GEMM, MLA step, graphs"
timeout 200 carry1/tests28 --gtest_filter='*MlaGemm*:*Mla*:*Graph*' > $OUT/tests.log 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED|  SKIPPED)|tests ran" $OUT/tests.log | head -20
grep -E "^\[  FAILED" $OUT/tests.log | head
el "seed A/B: N=100 budgets 8192,2048 and N=1, graph mode, 2 rounds"
seedrow() { grep -E "^(Requests|Token budget per step|Total step time, wall|Total step time, device|Host share of total)" | awk -F'  +' '{printf "%s=%s ", $1, $2} END {print ""}'; }
for r in 1 2; do
  for b in mb27 mb28 mb28_notune; do
    bin=carry1/${b%_notune}; env=""; [ "$b" = mb28_notune ] && env="MLAKIT_GEMM_TUNE=0"
    for n in 100 1; do
      env $env timeout 100 $bin seed --requests $n --budgets 8192,2048 --modes graph --reps 3 --no-check \
        > $OUT/seed_${b}_n${n}_r$r.log 2>&1 || echo "$b n$n r$r rc=$?"
      echo "$b r$r: $(cat $OUT/seed_${b}_n${n}_r$r.log | awk '/^Requests/{print "\n" $0; next} /^(Token budget|Total step time, wall)/{print}' | tr -s ' ' | tr '\n' ' ')"
    done
  done
done
el "checked run of the tuned binary (float64 reference), N=1 and N=100 at 8192"
timeout 120 carry1/mb28 seed --requests 1,100 --budgets 8192 --modes graph,eager --reps 1 > $OUT/seed_mb28_checked.log 2>&1; echo "checked rc=$?"
grep -iE "check|error|PASS|FAIL" $OUT/seed_mb28_checked.log | head -10
el done
