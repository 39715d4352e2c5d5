#!/bin/bash
# Session 30 call 4: compare_mla.py's N=1 case with the step's first CUDA event recorded before
# the wall clock starts (new) against HEAD's harness, which recorded it inside (prev; carried as
# carry1/compare_mla_prev.py), three alternated rounds of separate processes, 21 timed passes each;
# and the host cost of one torch.cuda.Event.record() from Python, hot and after a 1 ms GPU wait.
set -u
source bench/device_env.sh binding flashinfer
cp carry1/compare_mla_prev.py bench/compare_mla_prev.py
python3 - <<'PY' 2>&1 | tee $OUT/event_cost.txt
import time, statistics, torch
torch.cuda.synchronize()
x = torch.empty(1, device="cuda")
def probe(wait):
    out = []
    for _ in range(200):
        e = torch.cuda.Event(enable_timing=True)
        if wait:
            torch.cuda._sleep(2_000_000)  # ~1 ms of GPU spin: the host waits in synchronize
        torch.cuda.synchronize()
        t0 = time.perf_counter(); e.record(); out.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(out), sorted(out)[int(0.9 * len(out))]
for w in (False, True):
    m, p90 = probe(w)
    print(f"Event.record() host cost {'after a 1 ms GPU wait' if w else 'hot, after a sync'}: median {m:.1f} us, p90 {p90:.1f} us")
PY
el "event probe"
P=fa2_vllm,flashinfer_fa3,mlakit_step_graph,mlakit_step_graph_native
for r in 1 2 3; do
  for v in prev new; do
    f=bench/compare_mla.py; [ $v = prev ] && f=bench/compare_mla_prev.py
    timeout 150 python3 $f --cases 1:8192 --paths $P --reps 21 > /tmp/cm_${v}_r$r.log 2>&1
    echo "== $v r$r rc=$?"
    grep -E "^  N=1 budget 8192 " /tmp/cm_${v}_r$r.log | head -4
    grep -E "host per step" /tmp/cm_${v}_r$r.log | head -4
  done
  el "round $r"
done 2>&1 | tee $OUT/rounds.txt
tar czf $OUT/logs.tgz -C /tmp $(cd /tmp && ls cm_*.log)
