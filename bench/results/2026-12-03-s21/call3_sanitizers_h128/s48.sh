#!/bin/bash
# Device call 3 of session 21: v15's racecheck and synccheck (memcheck ran at v15 in session 20),
# then a probe of H=128 1x8192's per-process modes: call 1 and 2 measured 628-638 or 682-716
# TFLOP/s in separate processes of one binary, while ncu (clocks not locked, one launch after
# five) timed 3.82-3.83 ms (~717) in all six processes it profiled. Per process: median, min and
# mean over 60 launches (mlakit-bench --json), the SM clock and power sampled every 20 ms.
# carry3/: mlakit-bench and mlakit_gpu_tests of v15 (carry3/COMMIT), 90a build.
# Run from the repository root with carry ["carry3"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=carry3
export MLAKIT_GIT_COMMIT=$(cat $C/COMMIT)
F='KernelsHeadDimsAndTypes/CudaPrefill.*/sm90_d192x128_bf16:Kernels/CudaGraph*/sm90:Shapes/CudaSplitK.*/sm90_h16_16_d128r64v128_bf16_causal:BlockSizes/CudaMlaGatherOp.*:Shapes/CudaMlaStep.*/sm90_h16_bs16_*:Upload/CudaMlaGraph.*/upload_in_run'
for tool in synccheck racecheck; do  # scripts/gpu-check's sanitize filter and racecheck rule
  f="$F"; [ $tool = racecheck ] && f="${F%:Shapes/CudaMlaStep*}"
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $C/mlakit_gpu_tests --gtest_filter="$f" > $OUT/$tool.log 2>&1
  echo "$tool rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | tail -1) $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$tool.log | tr '\n' ' ')"
  el $tool
done
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 20 > $OUT/smi.csv 2>&1 &
SMI=$!
for k in 1 2 3 4 5 6; do
  sleep 1.5
  echo "== h128 process $k start $(date +%T.%N)"
  timeout 40 $C/mlakit-bench --kernel sm90 --workload v3_128h_8192 --iters 60 --no-check --json /tmp/h$k.json 2>&1 | grep -E "cuda:0/|rror"
  python3 -c "import json,sys; d=json.load(open('/tmp/h$k.json')); r=[x for x in d['results'] if 'ms' in x][0]; print('median %.3f min %.3f mean %.3f launches/sample %s' % (r['ms'], r['ms_min'], r['ms_mean'], r.get('launches_per_sample')))" 2>&1
  echo "== end $(date +%T.%N)"
done > $OUT/h128_probe.txt 2>&1
echo "== rotate 3 (three input sets at distinct addresses)" >> $OUT/h128_probe.txt
for k in 1 2 3; do
  timeout 40 $C/mlakit-bench --kernel sm90 --workload v3_128h_8192 --iters 60 --rotate 3 --no-check 2>&1 | grep -E "cuda:0/|rror"
done >> $OUT/h128_probe.txt 2>&1
kill $SMI
cat $OUT/h128_probe.txt; el probe
