#!/bin/bash
# Session 12, device call 1: oracle variants (Q loaded once, no epilogue stores) and K0-first
# against the base kernel; ncu of mlakit and FlashInfer fa3 at 8x999+200.
set -u
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
WL="--workload 8x999+200 --workload 100x999 --workload 1x16384 --workload v3_128h_8192 --workload 1x999"
for r in 1 2; do for b in base q1 ns k0; do
  echo "== bench $b round $r"
  timeout 60 carry4/$b/mlakit-bench --kernel sm90 $WL --iters 30 --no-check 2>&1 | grep -E "cuda:0"
done; el round$r; done
echo "== ncu mlakit base 8x999+200"
timeout 120 ncu --clock-control none --set full --import-source yes -k regex:prefill_sm90 --launch-skip 3 --launch-count 1 -o /tmp/ml carry4/base/mlakit-bench --kernel sm90 --workload 8x999+200 --iters 2 --warmup 3 --no-check --rotate 1 > /tmp/ncu_ml.log 2>&1; echo rc=$?; tail -3 /tmp/ncu_ml.log
mkdir -p /tmp/r
ncu -i /tmp/ml.ncu-rep --page details > /tmp/r/ml_details.txt 2>&1
ncu -i /tmp/ml.ncu-rep --page source --print-source sass --csv > /tmp/r/ml_src.csv 2>&1
python3 carry4/ncu_stalls.py /tmp/r/ml_src.csv 50 > /tmp/r/ml_stalls.txt 2>&1; head -20 /tmp/r/ml_stalls.txt
el ncu_ml
set +u; FI_USE_PREBUILT=1 source .peers/flashinfer/setup_flashinfer.sh > /tmp/fi_setup.log 2>&1; set -u; tail -2 /tmp/fi_setup.log
el fi_setup
timeout 200 ncu --clock-control none --set full -k regex:"Prefill|prefill" --launch-skip 2 --launch-count 1 -o /tmp/fi python3 bench/compare.py --workload 8x999+200 --methods flashinfer_fa3 --iters 2 --warmup 1 --no-ceilings --overhead none --no-fi-setup > /tmp/ncu_fi.log 2>&1; echo rc=$?; tail -3 /tmp/ncu_fi.log
ncu -i /tmp/fi.ncu-rep --page details > /tmp/r/fi_details.txt 2>&1
ncu -i /tmp/fi.ncu-rep --page source --print-source sass --csv > /tmp/r/fi_src.csv 2>&1
python3 carry4/ncu_stalls.py /tmp/r/fi_src.csv 50 > /tmp/r/fi_stalls.txt 2>&1; head -20 /tmp/r/fi_stalls.txt
el ncu_fi
rm -f /tmp/r/*.csv
tar czf $OUT/r1.tgz -C /tmp r
