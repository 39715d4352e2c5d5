#!/bin/bash
# Session 34 call 4: call 3 again for FlashInfer fa3 alone (call 3's `-c 2` caught mlakit's check launch and its timed one, no fa3 launch).
# (128, 128) fa3 runs 702 TFLOP/s against mlakit's 641 with the same 128 x 128 tiles (at (192, 128)
# mlakit leads); call 2: issue turns (fa3's order at this Dvo) do not close it. Here ncu, clocks
# locked at base, one launch each of 1x16384 d128x128: speed of light, the compute pipes,
# instruction counts and warp states; then stall sampling by SASS line (bench/ncu_stalls.py).
# carry [".peers"] (the binding is built here from the working tree: 9f98a2b's kernel).
# Prediction: mlakit's tensor pipe busy ~78-80% of cycles against fa3's ~88%, the difference in
# issued instructions per tile (uniform datapath, branches) as at (192, 128) in session 25.
set -u
rm -rf build-py
source bench/device_env.sh flashinfer
el setup
timeout 200 python3 - > $OUT/jit.txt 2>&1 <<'PY'
import time, torch
from flashinfer.prefill import BatchPrefillWithRaggedKVCacheWrapper
ws = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
qo = torch.tensor([0, 999], dtype=torch.int32, device="cuda")
t0 = time.time()
w = BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="fa3")
w.plan(qo, qo, 16, 16, 128, head_dim_vo=128, causal=True, q_data_type=torch.bfloat16)
q = torch.randn(999, 16, 128, dtype=torch.bfloat16, device="cuda")
w.run(q, q, q); torch.cuda.synchronize()
print("fa3 d128 built+ran in", round(time.time() - t0, 1), "s", flush=True)
PY
tail -1 $OUT/jit.txt
el jit
ARGS="--dims 128x128 --workload 1x16384 --methods flashinfer_fa3 --iters 1 --warmup 0 --no-ceilings --check-rows 8 --plan-iters 1 --overhead none --fi-allow-jit"
timeout 240 ncu -f --clock-control base -k 'regex:PrefillWithKVCache' -c 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats \
  --section SourceCounters --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.sum,smsp__inst_executed_op_branch.sum,sm__inst_executed.sum \
  -o /tmp/d128 python3 bench/compare.py $ARGS > $OUT/ncu_run.txt 2>&1
echo "ncu rc=$?"; tail -3 $OUT/ncu_run.txt
el ncu
ncu -i /tmp/d128.ncu-rep --page details > $OUT/details.txt 2>&1
grep -E "prefill_sm90_kernel|PrefillWithKVCache|Duration|Elapsed Cycles|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|Executed Instructions  |Warp Cycles Per Issued|Stall|Tensor|Avg. Active Threads" $OUT/details.txt | cut -c1-150 | head -70
for k in PrefillWithKVCache; do
  ncu -i /tmp/d128.ncu-rep -k "regex:$k" --launch-count 1 --page source --print-source sass --csv \
    > /tmp/src_$k.csv 2>/dev/null && python3 bench/ncu_stalls.py /tmp/src_$k.csv 30 > $OUT/stalls_$k.txt
  head -22 $OUT/stalls_$k.txt
done
ncu -i /tmp/d128.ncu-rep --page raw --csv --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum,sm__inst_executed_pipe_uniform.sum,smsp__inst_executed_op_branch.sum,sm__cycles_elapsed.avg > $OUT/raw.csv 2>&1
cat $OUT/raw.csv | cut -c1-400 | head -5
el done
