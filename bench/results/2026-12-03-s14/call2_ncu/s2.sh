#!/bin/bash
# Session 14, device call 2: why the cross-item consumer is slower per kv tile: ncu --set full of
# one launch, v10 + late claim (base) against cross-item (xi), 1x16384 and 8x999+200.
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
B=carry5/b
prof() {  # prof NAME BUILD WORKLOAD
  timeout 150 ncu --clock-control none --set full --import-source yes -k regex:prefill_sm90 --launch-skip 3 --launch-count 1 \
    -o /tmp/$1 $B/$2/mlakit-bench --kernel sm90 --workload $3 --iters 2 --warmup 3 --no-check --rotate 1 > /tmp/$1.log 2>&1
  echo "$1 rc=$?"; tail -2 /tmp/$1.log
  ncu -i /tmp/$1.ncu-rep --page details > $OUT/$1_details.txt 2>&1
  ncu -i /tmp/$1.ncu-rep --page source --print-source sass --csv > /tmp/$1_src.csv 2>&1
  python3 bench/ncu_stalls.py /tmp/$1_src.csv 60 > $OUT/$1_stalls.txt 2>&1
  head -16 $OUT/$1_stalls.txt; el $1
}
prof base_16k base 1x16384
prof xi_16k xi 1x16384
prof xi_8x xi 8x999+200
prof base_8x base 8x999+200
grep -E "Duration|SM Frequency|Executed Ipc A|Issue Slots Busy|No Eligible|Registers Per|Local Memory|L1/TEX Hit|Instruction Cache|Branch Instructions " $OUT/*_details.txt | head -60
