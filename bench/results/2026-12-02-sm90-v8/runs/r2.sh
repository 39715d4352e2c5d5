#!/bin/bash
set -u
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload 100x999 --workload 8x999+200 --workload 1x999 --workload ctx_8x1024_vs_4096 --workload ctx_799_vs_200"
for r in 1 2; do for b in v1 pp pps; do
  echo "== bench $b round $r"
  timeout 90 carry3/$b/mlakit-bench --kernel sm90 $WL --iters 30 $([ $r = 2 ] && echo --no-check) 2>&1 | grep -E "cuda:0|FAIL|rror"
done; done
