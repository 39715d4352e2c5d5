#!/bin/bash
# Session 29 call 3: does compare.py's method order decide fa3's 1.2-3.9% lead on 1x32768?
# Call 2 found compare_mla.py's path run second 1.6-4.9% slower (N=100, ~60 ms passes under the
# power cap). compare.py times each method's 5 + 30 launches back to back, mlakit first. Here the
# two long power-capped workloads, mlakit and fa3 in both orders, two processes per order,
# alternated. Prediction: if the order matters, the method run second reads 1-3% lower in both
# orders; if not, fa3 leads 1x32768 by 1-4% in both.
# The binding is rebuilt (the device kept an older build-py of unknown commit).
set -u
source bench/device_env.sh
rm -rf build-py
source bench/device_env.sh binding flashinfer
python3 -c "import mlakit, sys; print('binding', mlakit.__file__)"
W="--workload 1x32768 --workload v3_128h_8192 --no-ceilings --overhead none"
for r in 1 2; do
  for ord in mlakit,flashinfer_fa3 flashinfer_fa3,mlakit; do
    f=$OUT/r${r}_${ord/,/_then_}.log
    timeout 120 python3 bench/compare.py $W --methods $ord > $f 2>&1
    echo "r$r $ord rc=$?"; grep -E "^\s+(mlakit|flashinfer_fa3)\s" $f | head -4
  done
done
el order
