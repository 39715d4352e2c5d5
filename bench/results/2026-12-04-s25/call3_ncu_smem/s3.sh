#!/bin/bash
# Session 25 call 3: is shared-memory bandwidth the co-limit of the kv tile? Estimate (docs):
# at the tensor-bound period (2560 cycles per 128x128 tile, both warpgroups) the SS wgmmas of S
# read 96 B/clk and the RS wgmmas of P V 64 B/clk (Q/K, V from shared memory), and TMA writes
# 80 KB of K/V per tile: ~114 B/clk of the SM's 128. ncu's shared-memory / data-bank counters for
# one 1x32768 launch of mlakit (HEAD) and of FlashInfer fa3, clocks locked at base.
set -u
source bench/device_env.sh flashinfer
ncu --query-metrics --chip gh100 > /tmp/qm.txt 2>&1
grep -iE "bank|shared|gmma|tma|mem_shared|lsu|l1tex__throughput|tensor" /tmp/qm.txt > $OUT/query_metrics.txt
M=""
for m in l1tex__data_bank_reads l1tex__data_bank_writes l1tex__data_pipe_lsu_wavefronts_mem_shared \
         l1tex__data_pipe_lsu_wavefronts l1tex__throughput sm__pipe_tensor_op_gmma_cycles_active \
         sm__pipe_tensor_op_hmma_cycles_active sm__inst_executed_pipe_uniform l1tex__m_xbar2l1tex_read_bytes \
         sm__cycles_elapsed smsp__inst_executed sm__throughput l1tex__data_bank_conflicts_pipe_lsu_mem_shared; do
  if grep -qE "^ *$m( |$)" /tmp/qm.txt; then M="$M,$m.sum,$m.avg.pct_of_peak_sustained_elapsed"; else echo "no metric $m"; fi
done
M=${M#,}; echo "metrics: $M"
el query
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis"
timeout 150 ncu --clock-control base -k 'regex:prefill_sm90_kernel' -c 1 $SEC --metrics "$M" -o /tmp/mk \
  carry1/mb --kernel sm90 --workload 1x32768 --iters 1 --warmup-ms 0 --no-check > /tmp/mk_run.txt 2>&1
echo "ncu mlakit rc=$?"; tail -2 /tmp/mk_run.txt
ARGS="--workload 1x32768 --methods flashinfer_fa3 --iters 1 --warmup 0 --no-ceilings --check-rows 8 --plan-iters 1 --overhead none"
timeout 200 ncu --clock-control base -k 'regex:PrefillWithKVCache' -c 1 $SEC --metrics "$M" -o /tmp/fa3 \
  python3 bench/compare.py $ARGS > /tmp/fa3_run.txt 2>&1
echo "ncu fa3 rc=$?"; tail -2 /tmp/fa3_run.txt
el ncu
for k in mk fa3; do
  ncu -i /tmp/$k.ncu-rep --page details > $OUT/details_$k.txt 2>&1
  ncu -i /tmp/$k.ncu-rep --page raw --csv --metrics "$M" > $OUT/raw_$k.csv 2>&1
done
grep -iE "shared|bank|Duration|SM Frequency|Elapsed Cycles|Tensor|L1/TEX Hit|Mem Busy|Max Bandwidth|Issue Slots" $OUT/details_mk.txt | head -40
echo ---- fa3
grep -iE "shared|bank|Duration|SM Frequency|Elapsed Cycles|Tensor|L1/TEX Hit|Mem Busy|Max Bandwidth|Issue Slots" $OUT/details_fa3.txt | head -40
el done
