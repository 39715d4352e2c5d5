#!/bin/bash
# Device call 4 of session 24: the fa3 side of call 2's stall sampling (call 2's `-c 2` caught
# two mlakit launches). ncu SourceCounters + WarpStateStats, clocks locked at base, one 1x32768
# launch of FlashInfer fa3 as compare.py calls it; bench/ncu_stalls.py over its SASS page.
# Question: which stall reasons does fa3's launch spend less on than mlakit's (call 2:
# wait 33%, selected 17%, dispatch 11%, barrier 9%, long_sb 3.6%, short_sb 4.1%)?
# Run from the repository root with carry [".peers"] (no mlakit build needed).
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi.txt 2>&1 || tail -3 /tmp/fi.txt
el setup
ARGS="--workload 1x32768 --methods flashinfer_fa3 --iters 1 --warmup 0 --no-ceilings --check-rows 8 --plan-iters 1 --overhead none"
timeout 150 ncu --clock-control base -k 'regex:PrefillWithKVCache' -c 1 --section SourceCounters \
  --section WarpStateStats -o /tmp/stalls python3 bench/compare.py $ARGS > /tmp/ncu_run.txt 2>&1
echo "ncu rc=$?"; tail -3 /tmp/ncu_run.txt
ncu -i /tmp/stalls.ncu-rep --page source --print-source sass --csv > /tmp/src_fa3.csv 2>/tmp/src_err.txt
echo "csv rc=$? lines $(wc -l < /tmp/src_fa3.csv)"; head -c 300 /tmp/src_err.txt
python3 bench/ncu_stalls.py /tmp/src_fa3.csv 40 > $OUT/stalls_fa3.txt 2>&1; head -45 $OUT/stalls_fa3.txt
ncu -i /tmp/stalls.ncu-rep --page details --section WarpStateStats > $OUT/warp_states_fa3.txt 2>&1
grep -E 'Warp Cycles|Active Warps|Issued' $OUT/warp_states_fa3.txt | head
el done
