set -u
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
P=carry1/gemm_algo_probe
$P --heads 16 --m 1024,2048,4096,8192,9216 --iters 50 --algos 24 > $OUT/gemm_h16.txt 2>&1; echo rc=$?
$P --heads 128 --m 1024,4096,9216 --iters 20 --algos 16 > $OUT/gemm_h128.txt 2>&1; echo rc=$?
grep -E "^m=|heur#" $OUT/gemm_h16.txt | awk '/^m=/{print; c=0; next} {c++; if (c<=4) print}'
grep -E "^m=|heur#" $OUT/gemm_h128.txt | awk '/^m=/{print; c=0; next} {c++; if (c<=3) print}'
