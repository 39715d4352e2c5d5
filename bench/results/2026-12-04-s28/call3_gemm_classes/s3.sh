# Session 28 call 3: how the best cuBLASLt candidate moves with m on the step's exact shapes
# (lda 576), and what the tuned build picks per class (MLAKIT_GEMM_TUNE_LOG=1).
set -u
source bench/device_env.sh
P=carry1/gemm_algo_probe
$P --heads 16 --lda 576 --iters 30 --algos 16 --m 768,1024,1536,2048,2999,3072,4096,5120,6144,7168,8192,8993,10240,12288 > $OUT/gemm_h16_lda576.txt 2>&1; echo probe rc=$?
awk '/^m=/{m=$1; d=$0; sub(/.*: /,"",d); c=0; next} /max workspace 0/{c=1; next} /max workspace 32/{c=0} c==1 && /heur#/{print m, "default", d, "| best", $3, $5, $13, $14; c=2}' $OUT/gemm_h16_lda576.txt
MLAKIT_GEMM_TUNE_LOG=1 timeout 60 carry1/mb28 seed --requests 100 --budgets 8192,2048 --modes graph --reps 3 --no-check > $OUT/seed_log.txt 2>&1; echo seed rc=$?
grep "gemm tune" $OUT/seed_log.txt
grep -E "Total step time, wall" $OUT/seed_log.txt
