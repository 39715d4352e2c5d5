#!/bin/bash
# Session 27, call 5: (a) plan()'s Python pieces after a GPU wait at b031e91 (an int32 torch block
# table passed to the extension as it is); (b) why the N=100 budget-8192 step reads a "host share"
# of 8-9% (1 - busy / wall) when its wall time is only 0.2 ms above its event-timed device time:
# the SM clock sampled every 20 ms through compare_mla's timed passes and its profiled pass, and
# through the C++ step. Hypothesis: the timed passes run the GPU under its power cap at a lower
# clock than the profiled pass (whose host is slowed by the profiler), so busy (profiled) < kernel
# time (timed) and the difference is read as host share.
set -u
source bench/device_env.sh binding
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit --format=csv,noheader
timeout 25 python3 bench/mla_plan_split_probe.py --iters 200 --wait sync 2>&1 | tee $OUT/plan_split_sync.txt
el probe
stamp() { while IFS= read -r l; do echo "$(date +%s.%N | cut -c1-14) $l"; done; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 20 > $OUT/smi.csv 2>&1 &
SMI=$!
sleep 1
echo "$(date +%s.%N | cut -c1-14) START compare_mla" > $OUT/marks.txt
timeout 150 python3 -u bench/compare_mla.py --cases 100:8192 --paths mlakit_step_graph --reps 3 \
  --timeline $OUT/timeline.json --json $OUT/compare_mla.json 2>&1 | stamp > $OUT/compare_mla.log
echo "$(date +%s.%N | cut -c1-14) START seed" >> $OUT/marks.txt
timeout 60 carry1/mb-s27b seed --requests 100 --budgets 8192 --modes graph --reps 3 2>&1 | stamp > $OUT/seed.log
echo "$(date +%s.%N | cut -c1-14) END" >> $OUT/marks.txt
sleep 0.5; kill $SMI
grep -E "total .*wall|host share" $OUT/compare_mla.log | tail -4
grep -E "Total step time" $OUT/seed.log
python3 - "$OUT" <<'PY'
import sys, datetime, statistics
out = sys.argv[1]
def t(s):  # nvidia-smi timestamp "2026/12/04 12:10:11.123" (local time) -> epoch
    return datetime.datetime.strptime(s.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
rows = []
for l in open(f"{out}/smi.csv"):
    p = [x.strip() for x in l.split(",")]
    try:
        rows.append((t(p[0]), float(p[1].split()[0]), float(p[2].split()[0])))
    except Exception:
        pass
log = [l.split(" ", 1) for l in open(f"{out}/compare_mla.log")]
def when(pat):
    for ts, l in log:
        if pat in l:
            return float(ts)
seg = {"timed passes": (when("=== N=100"), when("=== profiled passes")),
       "profiled pass": (when("=== profiled passes"), when("per step, wall ms"))}
marks = [l.split() for l in open(f"{out}/marks.txt")]
seg["C++ seed"] = (float(marks[1][0]), float(marks[2][0]))
for name, (a, b) in seg.items():
    if a is None or b is None:
        print(name, "segment not found"); continue
    sel = [r for r in rows if a <= r[0] <= b and r[2] > 150]  # samples with the GPU under load
    if sel:
        print(f"{name:14s} {b - a:6.1f} s  loaded samples {len(sel):4d}  SM clock median {statistics.median(r[1] for r in sel):6.0f} MHz"
              f" (p10 {sorted(r[1] for r in sel)[len(sel)//10]:.0f})  power median {statistics.median(r[2] for r in sel):5.0f} W")
    else:
        print(name, "no loaded samples", len(rows))
PY
python3 bench/timeline_kernels.py $OUT/timeline.json --top 6 | head -12
gzip -f $OUT/timeline.json
el done
