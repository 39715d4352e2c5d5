# Session 28 call 4: the tuned GEMM with the candidate pool widened to the lists of m rounded up to
# 256 and of m's class (the odd bucket 8993 had none of the fast tiles); seed A/B against c09a0e8.
set -u
source bench/device_env.sh
timeout 100 carry1/tests28 --gtest_filter='*MlaGemm*' > $OUT/tests_gemm.log 2>&1; echo "gemm tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|^\[       OK" $OUT/tests_gemm.log | head
MLAKIT_GEMM_TUNE_LOG=1 timeout 60 carry1/mb28 seed --requests 100 --budgets 8192,2048 --modes graph --reps 3 --no-check > $OUT/seed_log.txt 2>&1; echo seed rc=$?
grep "gemm tune" $OUT/seed_log.txt | sed -E 's/: 0=.* -> / -> /' | head -20
grep "m class 12288" $OUT/seed_log.txt
for r in 1 2 3; do
  for b in mb27 mb28; do
    for n in 100 1; do
      timeout 100 carry1/$b seed --requests $n --budgets 8192,2048 --modes graph --reps 3 --no-check > $OUT/seed_${b}_n${n}_r$r.log 2>&1 || echo "$b n$n r$r rc=$?"
      echo "$b n$n r$r: $(grep -E '^Total step time, wall' $OUT/seed_${b}_n${n}_r$r.log | awk '{print $NF}' | tr '\n' ' ')"
    done
  done
done
for b in mb27 mb28; do
  timeout 100 carry1/$b seed --heads 128 --requests 1,100 --budgets 8192 --modes graph --reps 3 --no-check > $OUT/seed_${b}_h128.log 2>&1 || echo "$b h128 rc=$?"
  echo "$b h128 n1,n100 b8192: $(grep -E '^Total step time, wall' $OUT/seed_${b}_h128.log | awk '{print $NF}' | tr '\n' ' ')"
done
