#!/bin/bash
# Device call 6 of session 21: how much of each named workload's time is the power limit. Call 4:
# H=128 1x8192 launches take 3.70 ms for the first ~40 ms of back-to-back load, then 4.2-4.37
# ms; with the GPU idle 5 ms before every launch (--gap-ms 5) all take 3.69-3.75. So: every named
# workload of the table of record, back to back (sustained, as compare.py and the targets time
# them) against --gap-ms 5 (each launch from a rested GPU), v15 (carry6/COMMIT); then the SM
# clock (nvidia-smi, 20 ms) during 150 back-to-back H=128 launches and 30 of 1x32768.
# Run from the repository root with carry ["carry6"].
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
C=carry6
export MLAKIT_GIT_COMMIT=$(cat $C/COMMIT)
WL="--workload 1x16384 --workload 1x32768 --workload v3_128h_8192 --workload v3_128h_4096 --workload ctx_8x1024_vs_4096 --workload 100x999 --workload 8x999+200 --workload 1x999 --workload ctx_799_vs_200"
for r in 1 2; do
  for mode in "sustained:" "rested:--gap-ms 5"; do
    n=${mode%%:*}; opt=${mode#*:}
    echo "== round $r $n"
    timeout 100 $C/mlakit-bench --kernel sm90 $WL --iters 20 --no-check $opt 2>&1 | grep -E "cuda:0/|rror"
  done
done > $OUT/regimes.txt 2>&1
cat $OUT/regimes.txt; el regimes
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader -lms 20 > $OUT/smi.csv 2>&1 &
SMI=$!
sleep 1
echo "h128 start $(date +%T.%N)" > $OUT/clock_runs.txt
timeout 40 $C/mlakit-bench --kernel sm90 --workload v3_128h_8192 --iters 150 --no-check 2>&1 | grep -E "cuda:0/|rror" >> $OUT/clock_runs.txt
echo "1x32768 start $(date +%T.%N)" >> $OUT/clock_runs.txt
timeout 40 $C/mlakit-bench --kernel sm90 --workload 1x32768 --iters 30 --no-check 2>&1 | grep -E "cuda:0/|rror" >> $OUT/clock_runs.txt
echo "end $(date +%T.%N)" >> $OUT/clock_runs.txt
sleep 1; kill $SMI
cat $OUT/clock_runs.txt; el clocks
