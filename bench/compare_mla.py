#!/usr/bin/env python3
"""The seed's serving workload, end to end, on one GPU in one process.

Replays the schedule of the seed's serving benchmark (N requests of 999 prompt tokens sent at
once; chunked prefill with a token budget per step: a request cut at the budget continues in the
next step with its first part as context; see bench/seed_schedule.py) through the attention of all
27 layers of DeepSeek-Coder-V2-Lite (16 heads, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head
128; random weights and latents, a paged latent cache [num_blocks, 16, 576]), once per "path"
(bench/mla_paths.py): vLLM's FA2 path, the seed's FlashInfer path (fa3; fa2 too), and mlakit's
MLA step (mlakit.MlaStep: eager, and graph-replayed with one CUDA graph per token bucket, captured
in the warm-up pass). On request (--paths), also mlakit's kernel dropped into vLLM's Python path
(mlakit_kernel_in_vllm_path[_graph]). --kv-cache-dtypes auto,fp8,fp8_ds_mla runs every mlakit step
path also on FP8 latent caches (vLLM's fp8, DeepSeek-V3.2's fp8_ds_mla; paths <path>@<format>), in the
same process and timed in turns with the rest, and reports each against the same path on the bf16
cache (target: at most FP8_CACHE_TARGET of its time).

Cases (default): N=1 budget 8192, N=100 budget 8192, N=100 budget 2048.

Per step, median of --reps passes after a warm-up pass (caches zeroed before each path's); the
timed passes of a case's paths are taken in turns (time_paths), so drift over the run (the GPU's
temperature under its power cap, the host) does not favour the path that runs first:
  wall_ms     synchronize, plan + 27 layers, synchronize: host wall time (what the engine waits)
  device_ms   CUDA events around the same (includes the device's idle gaps while the host works;
              the first event is recorded just before the wall clock starts)
  host_ms     time until the host has issued the whole step (before the final synchronize)
  busy_ms     GPU time actually busy in the step (kernels + copies, torch.profiler, one extra pass,
              run after every path of every case has been timed: see warm_path)
  host_share  1 - busy/wall: the part of the step the GPU waits for the host
Per request: the prefill-attention share of its time to first token = sum of the wall times of
the steps up to the one that finishes its prompt; mean, median, P99 printed like the seed's
"Serving Benchmark Result" block, next to the TTFT the seed measured for the whole engine.
Correctness: every path's layer-0 output of every step against a float32 reference computed from
the original latents (sampled rows), and a small case (all rows, all paths, one layer) first.

    python3 bench/compare_mla.py --smoke                    # seconds: tiny model, every path once
    python3 bench/compare_mla.py --json compare_mla.json    # the full run (a few minutes)
    python3 bench/compare_mla.py --cases 100:8192 --paths fa2_vllm,mlakit_step_graph
    python3 bench/compare_mla.py --cases 100:8192 --paths mlakit_step_graph --kv-cache-dtypes auto,fp8,fp8_ds_mla
    python3 bench/compare_mla.py --device cpu --smoke       # the harness on the CPU (FA2 emulated)
"""
from __future__ import annotations

import argparse
import bisect
import datetime
import json
import math
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_record as R  # noqa: E402
import seed_schedule as S  # noqa: E402
from ceilings import ceilings  # noqa: E402

# The seed's measured TTFT (whole engine, H200-class GPU, shared/seed/000_*.txt), for scale.
SEED_TTFT = {  # (N, budget) -> {path: (mean, median, p99) ms}
    (1, 8192): {"fa2_vllm": (29.76, 29.76, 29.76), "flashinfer_fa3": (37.58, 37.58, 37.58)},
    (100, 8192): {"fa2_vllm": (659.17, 666.53, 1196.01), "flashinfer_fa3": (1196.92, 1253.75, 2187.23)},
}
# The MLA step's targets: mlakit's step vs the FA2 and FlashInfer paths (total wall of the schedule).
TARGETS = [((100, 8192), "fa2_vllm", 4.0), ((100, 8192), "flashinfer_fa3", 3.0),
           ((100, 8192), "flashinfer_fa3_host", 3.0), ((1, 8192), "flashinfer_fa3_host", 2.5),
           ((1, 8192), "fa2_vllm", 2.5), ((1, 8192), "flashinfer_fa3", 2.5)]
HOST_SHARE_TARGET = 0.10  # graph-replayed step
# The step on an FP8 latent cache against the same step on the bf16 cache (its gather reads half the
# bytes): at most this ratio of the bf16 cache's total wall time.
FP8_CACHE_TARGET = 1.05
# The per-request absorbed choice (absorb_max_query_len): the step's wall time at N=100, budget
# 2048 against the same path up-projecting every request.
ABSORB_TARGET_CASE, ABSORB_TARGET = (100, 2048), 1.15
MLAKIT_PATHS_PREF = ["mlakit_step_graph", "mlakit_step_graph_uir", "mlakit_step_graph_native",
                     "mlakit_step", "mlakit_kernel_in_vllm_path_graph", "mlakit_kernel_in_vllm_path"]


def log(msg=""):
    print(msg, flush=True)


def short(ex, limit=300):
    """One line of an exception for tables and JSON (some carry pages of dispatcher text)."""
    text = f"{type(ex).__name__}: {ex}".strip().splitlines()[0] if str(ex).strip() else type(ex).__name__
    return text if len(text) <= limit else text[:limit] + " ..."


def parse_cases(spec):
    out = []
    for item in spec.split(","):
        n, _, b = item.strip().partition(":")
        out.append((int(n), int(b or 8192)))
    return out


class Clock:
    """CUDA events + synchronize on CUDA; plain wall time on the CPU."""

    def __init__(self, torch, dev):
        self.torch, self.cuda = torch, dev.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def event(self):
        return self.torch.cuda.Event(enable_timing=True) if self.cuda else None

    def heat(self, seconds):
        """Keeps the GPU busy with bf16 matrix products for about `seconds`, then syncs, so the
        next pass starts under the power cap (an engine's other layers keep the GPU busy; mlakit's
        N=100 step reads ~5% faster from a rested GPU). A stress reading, not a steady state: after
        200 ms of it the clock was still low and the host's calls slow on the H200."""
        if not self.cuda or seconds <= 0:
            return
        t = self.torch
        if getattr(self, "_heat", None) is None:
            g = t.Generator(device="cuda").manual_seed(0)
            a = t.randn(8192, 8192, device="cuda", dtype=t.bfloat16, generator=g)
            self._heat = (a, a.clone(), t.empty_like(a))
        a, b, c = self._heat
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(8):  # ~1.4 ms each on an H200: host ahead of the GPU by a few ms only
                t.mm(a, b, out=c)
            self.sync()


def run_pass(path, steps, bufs, clock, on_out=None):
    """One pass over the schedule: per step (wall, device, host) ms."""
    res = []
    for st in steps:
        st.load(bufs)
        clock.sync()
        e0, e1 = clock.event(), clock.event()
        # e0 is recorded before the wall clock starts: an engine records no event before its
        # step, and one record from Python took 7.6-11.6 us on the H200's host, which
        # the GPU (idle until the step's first launch) waited for inside every path's wall time.
        if e0 is not None:
            e0.record()
        t0 = time.perf_counter()
        out0 = path.run_step(st)
        if e1 is not None:
            e1.record()
        t1 = time.perf_counter()
        clock.sync()
        t2 = time.perf_counter()
        res.append(((t2 - t0) * 1e3, e0.elapsed_time(e1) if e0 is not None else None, (t1 - t0) * 1e3))
        if on_out is not None:
            on_out(st, out0)
    return res


TIMELINES = []  # --timeline: one entry per (case, path) profiled pass, in run order


def timeline_summary(marks, intervals):
    """Where a step's wall time goes when the GPU is not busy: the host's time before the first
    device activity (plan + launch), the gaps between consecutive activities (named by the pair
    around them), and the time after the last one (the host's synchronize). One dict per step."""
    out = {}
    for start, idx, ev in marks:
        iv = sorted(intervals.get(idx, []))
        host_s, host_e = ev.time_range.start, ev.time_range.end
        if not iv:
            continue
        gaps, by_pair = [], {}
        end = iv[0][1]
        for (s0, e0, n0), (s1, e1, n1) in zip(iv, iv[1:]):
            end = max(end, e0)
            g = s1 - end
            if g > 0:
                gaps.append(g)
                key = f"{n0[:40]} -> {n1[:40]}"
                by_pair[key] = by_pair.get(key, 0.0) + g
        top = sorted(by_pair.items(), key=lambda kv: -kv[1])[:6]
        out[idx] = {"host_us": host_e - host_s, "before_first_us": iv[0][0] - host_s,
                    "after_last_us": host_e - max(e for _, e, _ in iv), "gaps_us": sum(gaps),
                    "num_activities": len(iv), "num_gaps": len(gaps),
                    "median_gap_us": statistics.median(gaps) if gaps else 0.0,
                    "top_gap_pairs_us": top,
                    "activities": [(n[:60], s_ - host_s, e_ - s_) for s_, e_, n in iv]}
    return out


def busy_pass(torch, path, steps, bufs, clock, timeline=None):
    """{step index: GPU-busy ms} from torch.profiler over one pass; None when unavailable.
    Device activities (kernels, copies, memsets) are assigned to the step whose host time window
    contains their start (each step ends with a synchronize, so none spills into the next), which
    also covers kernels replayed from a CUDA graph; without device-side events, the per-step
    record_function ranges' device time is used instead."""
    from torch.profiler import ProfilerActivity, profile, record_function
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for st in steps:
            st.load(bufs)
            clock.sync()
            with record_function(f"mla_step_{st.index}"):
                path.run_step(st)
            clock.sync()
    events = list(prof.events())
    marks = sorted((ev.time_range.start, int(ev.name.rsplit("_", 1)[1]), ev) for ev in events
                   if ev.name.startswith("mla_step_") and str(getattr(ev, "device_type", "")).endswith("CPU"))
    if not marks:
        return None
    # (The GPU-side copy of a record_function range, "gpu_user_annotation", spans the whole step
    # gaps included: not device work.)
    dev_events = [ev for ev in events if not str(getattr(ev, "device_type", "")).endswith("CPU")
                  and not ev.name.startswith("mla_step_")]
    busy = {idx: 0.0 for _, idx, _ in marks}
    if dev_events:
        starts = [m[0] for m in marks]
        intervals = {idx: [] for _, idx, _ in marks}
        for ev in dev_events:
            i = bisect.bisect_right(starts, ev.time_range.start) - 1
            if i >= 0:
                intervals[marks[i][1]].append((ev.time_range.start, ev.time_range.end, ev.name))
        if timeline is not None:
            timeline.update(timeline_summary(marks, intervals))
        for idx, iv in intervals.items():  # union of intervals (no double count of overlaps)
            iv.sort()
            total, cur_s, cur_e = 0.0, None, None
            for s_, e_, _ in iv:
                if cur_e is None or s_ > cur_e:
                    if cur_e is not None:
                        total += cur_e - cur_s
                    cur_s, cur_e = s_, e_
                else:
                    cur_e = max(cur_e, e_)
            if cur_e is not None:
                total += cur_e - cur_s
            busy[idx] = total / 1e3
    else:
        for _, idx, ev in marks:
            us = getattr(ev, "device_time_total", None)
            busy[idx] = (us if us is not None else getattr(ev, "cuda_time_total", 0)) / 1e3
    if not any(busy.values()):
        log("    (the profiler saw no device activity: no busy time / host share)")
        return None
    return busy


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def replay_only_pass(path, steps, bufs, clock, reps=3):
    """Per step, the device time of its graph replayed `reps` times back to back after one plan
    (ms per replay): the step's own device time with no host work between replays and no profiler.
    1 - its sum / the timed passes' wall is a second reading of the host share, free of what the
    profiled pass changes (CUPTI's host overhead leaves the GPU gaps, so its kernels can run at a
    higher clock than the timed passes' under the power cap). None when the path has no graphs."""
    # Only the MLA step's graph paths: one graph per bucket (path.bucket), replayable on its own.
    # (GraphedPath, mlakit's kernel in vLLM's path, keeps (graph, output) pairs under other keys.)
    if (not clock.cuda or not hasattr(path, "graphs") or not hasattr(path, "bucket")
            or getattr(path, "emulated", False)):
        return None
    n_host = len(getattr(path, "host_split", []))
    out = []
    for st in steps:
        st.load(bufs)
        path.run_step(st)  # plans this step (and replays it once)
        g = path.graphs.get(path.bucket(st))
        if g is None:
            return None
        clock.sync()
        e0, e1 = clock.event(), clock.event()
        e0.record()
        for _ in range(reps):
            g.replay()
        e1.record()
        clock.sync()
        out.append(e0.elapsed_time(e1) / reps)
    if hasattr(path, "host_split"):
        del path.host_split[n_host:]
    return out


def warm_path(M, path, steps, bufs, clock, model, args, refs):
    """A path's warm-up pass (captures graphs, checks outputs against the reference):
    (relative errors, seconds). The timed passes come later (time_paths), for every path of the
    case in turns, and the profiled pass after every case (profile_path): PyTorch's profiler
    leaves CUPTI loaded once it has run (pytorch/pytorch#144455), which slows the CUDA calls of
    whatever is timed after it, so no timed pass may follow a profiled one."""
    cfg = model.cfg
    for L in model.layers:  # a path must read back only what it wrote itself
        L.cache.zero_()
    if hasattr(path, "reset_cache"):
        path.reset_cache()
    errs = []
    kind = getattr(path, "kv_cache_dtype", "auto")

    def check(st, out0):
        if args.no_check:
            return
        if (kind, st.index) not in refs:  # on an FP8 cache: the latents as that cache holds them
            refs[(kind, st.index)] = M.reference_layer(cfg, model.layers[0], st, rows_per_req=args.ref_rows,
                                                       kv_cache_dtype=kind)
        rows, ref = refs[(kind, st.index)]
        errs.append(M.relerr(out0, rows, ref))

    t0 = time.perf_counter()
    for _ in range(max(1, args.warmup_reps)):
        run_pass(path, steps, bufs, clock, on_out=check if not errs else None)
    warm_s = time.perf_counter() - t0
    if hasattr(path, "host_split"):
        path.host_split.clear()
    return errs, warm_s


def time_paths(paths, steps, bufs, clock, reps, rest_s=0.0, heat_s=0.0):
    """{name: [pass, ...]}: --reps timed passes of every path, taken in turns (round r starts at
    path r mod n), so that whatever drifts over the run (the GPU's temperature and with it its
    clock under the power cap, the host's state) falls on every path alike. Run one path's passes
    after another's instead and the second reads slower: on the H200 mlakit's two graph
    paths read 1.6-4.9% apart at N=100, the slower one always the one run second. A path whose pass
    raises is dropped: {name: exception}. rest_s > 0: the GPU idles that long before every pass
    (after a sync), so each pass starts from a rested GPU, as after a host-bound path's pass;
    heat_s > 0: bf16 products keep it busy that long before every pass (Clock.heat), so each
    starts under the power cap. Neither (the default): a pass follows the previous path's."""
    names = list(paths)
    passes, failed = {n: [] for n in names}, {}
    for r in range(reps):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            if name in failed:
                continue
            try:
                if rest_s > 0:
                    clock.sync()
                    time.sleep(rest_s)
                if heat_s > 0:
                    clock.heat(heat_s)
                passes[name].append(run_pass(paths[name], steps, bufs, clock))
            except Exception as ex:  # noqa: BLE001
                failed[name] = ex
                traceback.print_exc(limit=4)
                clock.sync()
    return passes, failed


def path_failed(case, name, ex, trace=True):
    """A path that raised is reported as skipped in the case, with the error."""
    case["paths"][name] = {"skipped": f"error: {short(ex)}"}
    log(f"  {name:26s} failed: {short(ex)}")
    if trace:
        traceback.print_exc(limit=4)


def summarize_path(path, steps, passes, errs, warm_s, bufs, clock, args):
    """Per-step medians of a path's timed passes, its totals, TTFT shares and check, and the
    replay-only reading of its graphs."""
    if getattr(path, "host_split", None):
        hs = path.host_split
        if getattr(path, "one_call", False):
            log(f"    host per step (median of {len(hs)}): plan(..., replay=graph) {med([h[0] for h in hs]):.1f} us "
                f"(plan + graph launch, one call)")
        else:
            log(f"    host per step (median of {len(hs)}): plan() {med([h[0] for h in hs]):.1f} us, "
                f"graph replay() {med([h[1] for h in hs]):.1f} us")
    per_step = []
    for i, st in enumerate(steps):
        wall = med([p[i][0] for p in passes])
        dev = med([p[i][1] for p in passes])
        host = med([p[i][2] for p in passes])
        per_step.append({"index": st.index, "tokens": st.T, "batch": st.B, "context": st.ctx_total,
                         "graph_rows": path.bucket(st) if hasattr(path, "bucket") else None,
                         "wall_ms": wall, "device_ms": dev, "host_ms": host, "busy_ms": None,
                         "host_share": None, "wall_ms_all": [p[i][0] for p in passes]})
    tot = lambda k: sum(s[k] for s in per_step) if all(s[k] is not None for s in per_step) else None  # noqa: E731
    total_wall = tot("wall_ms")
    ttft = S.ttft_per_request([st for st in steps_schedule(steps)], [s["wall_ms"] for s in per_step])
    maxerr = max(errs) if errs else None
    res = {"steps": per_step, "total_wall_ms": total_wall, "total_device_ms": tot("device_ms"),
           "total_host_ms": tot("host_ms"), "total_busy_ms": None,
           "pass_total_wall_ms": [sum(p[i][0] for i in range(len(steps))) for p in passes],
           "warmup_s": warm_s, "ttft": S.ttft_stats(ttft),
           "check": {"max_relerr": maxerr, "tol": args.tol,
                     "pass": (maxerr is not None and maxerr <= args.tol) if not args.no_check else None}}
    if getattr(path, "host_split", None):
        res["host_plan_us"] = med([h[0] for h in path.host_split])
        res["host_replay_us"] = med([h[1] for h in path.host_split])
    try:  # a second reading only: its failure must not cost the path its timed results
        ro = replay_only_pass(path, steps, bufs, clock)
    except Exception as ex:  # noqa: BLE001
        log(f"    (replay-only pass failed: {short(ex)})")
        ro = None
    if ro is not None:
        for s_, d in zip(per_step, ro):
            s_["replay_only_ms"] = d
        res["total_replay_only_ms"] = sum(ro)
        if total_wall:
            res["host_share_replay_only"] = 1.0 - sum(ro) / total_wall
    if hasattr(path, "graphs"):
        # Captures happen in the warm-up pass (first sight of a bucket/key), outside the timing.
        res["graphs_captured"] = len(path.graphs)
        res["graph_keys"] = sorted(str(k) for k in path.graphs)
        res["graph_mem_mb"] = getattr(path, "graph_bytes", 0) / 2**20
    return res


def profile_path(torch, path, steps, bufs, clock, args, res):
    """The profiled pass of a measured path: GPU busy time per step, and with it the host share."""
    if args.no_profile or not clock.cuda or "steps" not in res:
        return
    try:
        tl = {} if args.timeline else None
        busy = busy_pass(torch, path, steps, bufs, clock, timeline=tl)
        if tl:
            TIMELINES.append({"path": path.name, "steps": tl})
            for idx in sorted(tl)[:3]:
                t = tl[idx]
                log(f"    timeline step {idx}: host {t['host_us']:.0f} us, before first activity "
                    f"{t['before_first_us']:.0f}, {t['num_gaps']} gaps {t['gaps_us']:.0f} (median "
                    f"{t['median_gap_us']:.2f}), after last {t['after_last_us']:.0f}, "
                    f"{t['num_activities']} activities")
                for pair, us in t["top_gap_pairs_us"][:4]:
                    log(f"      gaps {us:7.1f} us  {pair}")
    except Exception as ex:  # noqa: BLE001
        log(f"    (profiler unavailable: {short(ex)}; no busy time / host share)")
        return
    if not busy:
        return
    for s_ in res["steps"]:
        b = busy.get(s_["index"])
        s_["busy_ms"] = b
        s_["host_share"] = (1.0 - b / s_["wall_ms"]) if (b is not None and s_["wall_ms"]) else None
    if all(s_["busy_ms"] is not None for s_ in res["steps"]):
        res["total_busy_ms"] = sum(s_["busy_ms"] for s_ in res["steps"])
        if res["total_wall_ms"]:
            res["host_share"] = 1.0 - res["total_busy_ms"] / res["total_wall_ms"]


def steps_schedule(steps):
    """StepInputs -> the seed_schedule.Step view ttft_per_request needs."""
    return [S.Step(st.index, st.chunks) for st in steps]


def fmt(x, spec, none="-"):
    return format(x, spec) if isinstance(x, (int, float)) and math.isfinite(x) else none


def serving_block(n, prompt, budget, layers, name, r, seed):
    t = r["ttft"]
    hs = r.get("host_share")
    lines = [
        "============ Serving Benchmark Result ============",
        f"(prefill attention only, {layers} layers; path {name})",
        f"{'Successful requests:':<41}{n}",
        f"{'Prefill steps (budget ' + str(budget) + '):':<41}{len(r['steps'])}",
        f"{'Total input tokens:':<41}{n * prompt}",
        f"{'Attention time, all steps (ms):':<41}{fmt(r['total_wall_ms'], '.2f')}",
        f"{'  device (events) / GPU busy (ms):':<41}{fmt(r['total_device_ms'], '.2f')} / {fmt(r['total_busy_ms'], '.2f')}",
        f"{'  host share:':<41}{fmt(100 * hs if hs is not None else None, '.1f')}%",
        f"{'Prefill tokens/s (attention only):':<41}"
        f"{fmt(n * prompt / (r['total_wall_ms'] * 1e-3) if r['total_wall_ms'] else None, '.0f')}",
        "---------------Time to First Token----------------",
        f"{'Mean TTFT (ms):':<41}{fmt(t['mean_ms'], '.2f')}",
        f"{'Median TTFT (ms):':<41}{fmt(t['median_ms'], '.2f')}",
        f"{'P99 TTFT (ms):':<41}{fmt(t['p99_ms'], '.2f')}",
    ]
    if seed:
        lines.append(f"(seed, whole engine: mean {seed[0]:.2f}, median {seed[1]:.2f}, P99 {seed[2]:.2f} ms; "
                     f"attention share of the mean {100 * t['mean_ms'] / seed[0]:.0f}%)")
    lines.append("==================================================")
    return "\n".join(lines)


def check_small(torch, M, P, args, dev, log):
    """All paths on a small schedule (one layer, all rows) against the reference and each other."""
    cfg = M.MLAConfig(layers=1, heads=args.heads, block_size=args.block_size)
    lens = [300, 77, 300, 1, 150]
    sched = S.build_schedule(lens, 256, heads=args.heads)
    tables = S.BlockTables(lens, cfg.block_size, seed=args.seed + 7)
    steps = M.make_steps(sched, tables)
    model = M.ModelData(cfg, 256, tables.num_blocks, dev, seed=args.seed + 3)
    caps = P.Capacity(max(st.B for st in steps), 256, max(1, max(st.ctx_total for st in steps)),
                      tables.max_blocks, tables.num_blocks)
    bufs = M.CommonBuffers(caps.max_batch, 256, tables.max_blocks, dev)
    refs_of = {}  # cache format -> per step (rows, reference)
    outs, result = {}, {}
    log(f"correctness, small case: prompts {lens}, budget 256, {len(steps)} steps "
        f"(contexts {[st.ctx_total for st in steps]}), 1 layer, all rows")
    for name in args.paths:
        try:
            path = P.make_path(name, cfg, model, caps)
            path.setup()
        except P.Skip as ex:
            log(f"  {name:26s} skipped: {ex}")
            result[name] = {"skipped": str(ex)}
            continue
        except Exception as ex:  # noqa: BLE001
            log(f"  {name:26s} setup failed: {short(ex)}")
            result[name] = {"skipped": f"error: {short(ex)}"}
            continue
        try:
            for L in model.layers:
                L.cache.zero_()
            if hasattr(path, "reset_cache"):
                path.reset_cache()
            kind = getattr(path, "kv_cache_dtype", "auto")
            if kind not in refs_of:
                refs_of[kind] = [M.reference_layer(cfg, model.layers[0], st, kv_cache_dtype=kind) for st in steps]
            refs = refs_of[kind]
            got = []
            for _ in range(2):  # twice: graph paths capture in the first pass, replay in the second
                got = []
                for st in steps:
                    st.load(bufs)
                    got.append(path.run_step(st).float().clone())
            errs = [M.relerr(o, rows, ref) for o, (rows, ref) in zip(got, refs)]
            outs[name] = got
            base = next(iter(outs))
            vs = max(float(((a - b).abs().amax() / b.abs().amax().clamp_min(1e-30)).item())
                     for a, b in zip(got, outs[base]))
            ok = max(errs) <= args.tol
            result[name] = {"max_relerr": max(errs), "vs_" + base: vs, "pass": ok}
            log(f"  {name:26s} max relerr vs float32 reference {max(errs):.2e}, vs {base} {vs:.2e}: "
                f"{'PASS' if ok else 'FAIL'}")
        except Exception as ex:  # noqa: BLE001
            log(f"  {name:26s} failed: {short(ex)}")
            traceback.print_exc(limit=4)
            result[name] = {"skipped": f"error: {short(ex)}", "pass": False}
        if dev.type == "cuda":
            torch.cuda.synchronize()
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=None, help="N:budget list (default 1:8192,100:8192,100:2048)")
    ap.add_argument("--prompt", type=int, default=999)
    ap.add_argument("--layers", type=int, default=None, help="default 27 (--smoke 2)")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--bucket-step", type=int, default=S.GRAPH_BUCKET_STEP_ABOVE,
                    help="graph paths: rows per CUDA-graph bucket above 1024 (mlakit-bench seed --bucket-step)")
    ap.add_argument("--paths", default=None,
                    help="comma-separated (default: fa2_vllm, flashinfer_fa3, flashinfer_fa3_host, flashinfer_fa2, mlakit_step, "
                    "mlakit_step_graph; also mlakit_kernel_in_vllm_path[_graph])")
    ap.add_argument("--kv-cache-dtypes", default="auto",
                    help="latent cache formats of the mlakit step paths, comma-separated: auto (the bf16 "
                    "cache), fp8 (vLLM's, layer scale 1.0), fp8_ds_mla (DeepSeek-V3.2's 656-byte rows); each "
                    "mlakit_step* path runs once per format, the FP8 ones named <path>@<format> (default auto)")
    ap.add_argument("--absorb", default=None,
                    help="absorb_max_query_len values of the mlakit step paths, comma-separated (0: every "
                    "request up-projects; -1: the library's default); each mlakit_step* path runs once per "
                    "value, named <path>/a<N> (default: once, the library's default)")
    ap.add_argument("--reps", type=int, default=None, help="timed passes over the schedule (default 5; --smoke 1)")
    ap.add_argument("--warmup-reps", type=int, default=1)
    ap.add_argument("--rest-ms", type=float, default=0.0,
                    help="the GPU idles this long before every timed pass (0: passes back to back, "
                    "each path after another's)")
    ap.add_argument("--heat-ms", type=float, default=0.0,
                    help="bf16 matrix products keep the GPU busy this long before every timed pass, so "
                    "each starts under the power cap (after --rest-ms)")
    ap.add_argument("--no-profile", action="store_true", help="skip the profiled pass (no busy time)")
    ap.add_argument("--no-ceilings", action="store_true",
                    help="skip the matrix-product ceiling (measured after every timed and profiled pass)")
    ap.add_argument("--merge", choices=["compiled", "eager"], default="compiled",
                    help="LSE merge of the PyTorch paths: torch.compile'd (fused, like vLLM's kernel) or eager")
    ap.add_argument("--ref-rows", type=int, default=32, help="rows per request checked against the reference")
    ap.add_argument("--tol", type=float, default=2e-2,
                    help="max relerr of layer 0 vs the float32 reference (2e-2: the K/V of a bf16 "
                    "up-projection differ by an ulp between matmul shapes; partial outputs are rounded "
                    "to bf16 before the merge)")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-small-check", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: 2 layers, N=1 and N=8 at budgets 8192/2048, one timed pass")
    ap.add_argument("--json", default=None)
    ap.add_argument("--timeline", default=None,
                    help="write the profiled pass's per-step device activities and the gaps between them "
                         "(what the host share is made of) to this JSON file")
    args = ap.parse_args(argv)
    args.layers = args.layers or (2 if args.smoke else 27)
    args.reps = args.reps or (1 if args.smoke else 5)
    cases = parse_cases(args.cases or ("1:8192,8:8192,8:2048" if args.smoke else "1:8192,100:8192,100:2048"))

    try:
        import torch
    except Exception as ex:  # noqa: BLE001
        log(f"compare_mla.py: PyTorch is not importable here ({ex!r}); run it on the GPU machine")
        return 1
    import mla_model as M
    import mla_paths as P
    args.paths = [p.strip() for p in (args.paths or ",".join(P.DEFAULT_PATHS)).split(",") if p.strip()]
    kinds = [k.strip() for k in args.kv_cache_dtypes.split(",") if k.strip()]
    for k in kinds:
        if k not in M.KV_CACHE_DTYPES:
            ap.error(f"--kv-cache-dtypes: unknown format {k!r}; known: {', '.join(M.KV_CACHE_DTYPES)}")
    args.paths = P.with_kv_cache_dtypes(args.paths, kinds)
    if args.absorb:
        try:
            limits = [int(a) for a in args.absorb.split(",") if a.strip()]
        except ValueError:
            ap.error(f"--absorb: integers expected, got {args.absorb!r}")
        args.paths = P.with_absorb(args.paths, limits)
    for p in args.paths:
        if not P.is_path_name(p):
            ap.error(f"unknown path {p!r}; known: {', '.join(P.PATH_NAMES)} (mlakit_step*@<kv cache dtype>)")
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        log("compare_mla.py: no CUDA device visible to PyTorch (--device cpu runs the harness on the CPU)")
        return 1
    env = {"torch": torch.__version__, "python": sys.version.split()[0], "device": str(dev)}
    if dev.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
    else:
        log("CPU run: FA2 is emulated by naive attention; times mean nothing (a check of the harness)")
    if args.smoke:
        log("SMOKE mode: few layers and requests, one timed pass: checks that everything runs")
    log(f"env: {env}")
    merge_kind = M.set_merge(args.merge if dev.type == "cuda" else "eager", log)
    log(f"LSE merge of the PyTorch paths: {merge_kind}")

    small = None
    if not args.no_small_check and not args.no_check:
        small = check_small(torch, M, P, args, dev, log)

    cfg = M.MLAConfig(layers=args.layers, heads=args.heads, block_size=args.block_size)
    scheds = {c: S.build_schedule([args.prompt] * c[0], c[1], args.bucket_step, args.heads) for c in cases}
    max_n = max(n for n, _ in cases)
    tables = S.BlockTables([args.prompt] * max_n, cfg.block_size, seed=args.seed + 1)
    cap_tokens = max(st.tokens for sc in scheds.values() for st in sc)
    t0 = time.perf_counter()
    model = M.ModelData(cfg, cap_tokens, tables.num_blocks, dev, seed=args.seed)
    caps = P.Capacity(max(st.batch for sc in scheds.values() for st in sc), cap_tokens,
                      max(1, max(st.context_tokens for sc in scheds.values() for st in sc)),
                      tables.max_blocks, tables.num_blocks, bucket_step=args.bucket_step)
    bufs = M.CommonBuffers(caps.max_batch, cap_tokens, tables.max_blocks, dev)
    log(f"model: {cfg.layers} layers, H={cfg.heads}, latent {cfg.latent}, block size {cfg.block_size}, "
        f"{tables.num_blocks} cache blocks/layer, input buffers for {cap_tokens} tokens "
        f"({time.perf_counter() - t0:.1f} s to allocate); graph buckets: mlakit.graph_rows_bucket, "
        f"256-row steps to 1024, then {args.bucket_step}")
    clock = Clock(torch, dev)

    # Paths are built once and reused across cases (graphs keyed by shape carry over).
    paths, skipped = {}, {}
    for name in args.paths:
        try:
            p = P.make_path(name, cfg, model, caps)
            p.setup()
            paths[name] = p
            log(f"path {name}: {p.describe()}")
        except P.Skip as ex:
            skipped[name] = str(ex)
            log(f"path {name}: skipped: {ex}")
        except Exception as ex:  # noqa: BLE001
            skipped[name] = f"error: {short(ex)}"
            log(f"path {name}: setup failed: {short(ex)}")
            traceback.print_exc(limit=4)

    out_cases, measured = [], []
    for (n, budget) in cases:
        sched = scheds[(n, budget)]
        steps = M.make_steps(sched, tables)
        log(f"\n=== N={n} x {args.prompt} tokens, budget {budget}: {len(steps)} steps, {cfg.layers} layers")
        log(S.describe(sched) if len(sched) <= 16 else S.describe(sched[:6]) + "\n  ...")
        refs = {}
        case = {"requests": n, "prompt": args.prompt, "budget": budget, "num_steps": len(steps),
                "schedule": [{"tokens": st.T, "batch": st.B, "context": st.ctx_total,
                              "chunks": [[c.req, c.ctx, c.new] for c in st.chunks]} for st in steps],
                "paths": {k: {"skipped": v} for k, v in skipped.items()}}
        warm = {}
        for name, p in paths.items():
            try:
                warm[name] = warm_path(M, p, steps, bufs, clock, model, args, refs)
            except Exception as ex:  # noqa: BLE001
                path_failed(case, name, ex)
            clock.sync()
        passes, failed = time_paths({k: paths[k] for k in warm}, steps, bufs, clock, args.reps,
                                    args.rest_ms / 1e3, args.heat_ms / 1e3)
        for name, ex in failed.items():
            path_failed(case, name, ex, trace=False)  # time_paths printed its traceback
        for name in warm:
            if name in failed:
                continue
            p = paths[name]
            try:
                r = summarize_path(p, steps, passes[name], *warm[name], bufs, clock, args)
                case["paths"][name] = r
                chk = r["check"]
                log(f"  {name:26s} total {fmt(r['total_wall_ms'], '9.2f')} ms wall, "
                    f"{fmt(r['total_device_ms'], '9.2f')} device, "
                    f"check {fmt(chk['max_relerr'], '.1e')} "
                    f"{'PASS' if chk['pass'] else ('FAIL' if chk['pass'] is False else '')}"
                    + (f", {r['graphs_captured']} graphs so far ({r['graph_mem_mb']:.0f} MB)"
                       if "graphs_captured" in r else ""))
            except Exception as ex:  # noqa: BLE001
                path_failed(case, name, ex)
            clock.sync()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        measured.append((case, steps))

    # The profiled passes, once every path of every case has been timed (see warm_path).
    if not args.no_profile and clock.cuda:
        log("\n=== profiled passes (GPU busy time per step; host share = 1 - busy / wall)")
    for case, steps in measured:
        for name, p in paths.items():
            r = case["paths"].get(name, {})
            if "steps" not in r:
                continue
            profile_path(torch, p, steps, bufs, clock, args, r)
            log(f"  N={case['requests']} budget {case['budget']} {name:26s} total "
                f"{fmt(r['total_wall_ms'], '9.2f')} ms wall, {fmt(r['total_busy_ms'], '9.2f')} busy, "
                f"host share {fmt(100 * r['host_share'] if r.get('host_share') is not None else None, '.1f')}%"
                + (f" (replay-only device time {r['total_replay_only_ms']:.2f} ms: "
                   f"{100 * r['host_share_replay_only']:.1f}%)" if r.get("host_share_replay_only") is not None else ""))
            clock.sync()
    # Last, so it changes no timed or profiled pass's power state.
    ceil = {}
    if clock.cuda and not args.no_ceilings:
        ceil = ceilings(torch, dev)
        log(f"\nceilings this run (after the passes): {ceil}")
    for case, steps in measured:
        case["work"] = work_of(scheds[(case["requests"], case["budget"])], cfg,
                               ceil.get("gemm_bf16_8192_tflops"))
        try:
            report_case(case, cfg, args)
        except Exception as ex:  # noqa: BLE001  (the JSON must still be written)
            log(f"report of this case failed: {short(ex)}")
            traceback.print_exc(limit=3)
        out_cases.append(case)

    try:
        targets = report_targets(out_cases)
    except Exception as ex:  # noqa: BLE001
        log(f"targets report failed: {short(ex)}")
        targets = None
    if args.json:
        doc = {"tool": "bench/compare_mla.py",
               "time_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "command_line": " ".join(sys.argv), "env": env, "smoke": args.smoke, "ceilings": ceil,
               "git_commit": R.git_commit(), "source_digest": R.source_digest(),
               "config": {"layers": cfg.layers, "heads": cfg.heads, "kv_lora_rank": cfg.kv_lora_rank,
                          "qk_nope": cfg.qk_nope, "qk_rope": cfg.qk_rope, "v_head": cfg.v_head,
                          "block_size": cfg.block_size, "sm_scale": cfg.sm_scale, "merge": merge_kind,
                          "reps": args.reps, "warmup_reps": args.warmup_reps,
                          "rest_ms": args.rest_ms, "heat_ms": args.heat_ms,
                          "bucket_step": args.bucket_step},
               "method": __doc__.split("Per step,", 1)[1].split("    python3", 1)[0].strip(),
               "small_check": small, "cases": out_cases, "targets": targets}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(R.finite_or_none(doc), f, indent=1, default=lambda o: None)
        log(f"wrote {args.json}")
    if args.timeline:
        os.makedirs(os.path.dirname(os.path.abspath(args.timeline)), exist_ok=True)
        with open(args.timeline, "w") as f:
            json.dump({"git_commit": R.git_commit(), "passes": TIMELINES}, f, indent=0, default=lambda o: None)
        log(f"wrote {args.timeline}")
    failed = [n for n, r in (small or {}).items() if r.get("pass") is False]
    failed += [f"{c['requests']}:{c['budget']}/{n}" for c in out_cases for n, r in c["paths"].items()
               if (r.get("check") or {}).get("pass") is False]
    if failed:
        log(f"correctness FAILED: {', '.join(failed)}")
    return 1 if failed else 0


def work_of(sched, cfg, ceiling_tflops=None):
    """The schedule's useful work through all layers (seed_schedule.schedule_flops: visible
    attention pairs, up-projection of real rows), the same for every path, and the time it takes
    at the run's matrix-product ceiling when that was measured."""
    # The schedule's FLOP count (tools/seed_schedule.cc) takes DeepSeek-Coder-V2-Lite's widths.
    assert (cfg.kv_lora_rank, cfg.qk_nope, cfg.qk_rope, cfg.v_head) == (512, 128, 64, 128)
    f = S.schedule_flops(sched, cfg.layers)
    w = {k + "_tflop": v / 1e12 for k, v in f.items()}
    w["ceiling_tflops"] = ceiling_tflops
    w["ms_at_ceiling"] = f["total"] / ceiling_tflops / 1e9 if ceiling_tflops else None
    return w


def rate_of(work, wall_ms):
    """(TFLOP/s, % of the ceiling or None) of the schedule's useful work done in wall_ms."""
    if not wall_ms:
        return None, None
    tf = work["total_tflop"] / (wall_ms * 1e-3)
    return tf, (100.0 * tf / work["ceiling_tflops"] if work.get("ceiling_tflops") else None)


def report_case(case, cfg, args):
    paths = {k: v for k, v in case["paths"].items() if "steps" in v}
    if not paths:
        return
    names = list(paths)
    log("")
    log(f"per step, wall ms (N={case['requests']}, budget {case['budget']}; median of {args.reps}):")
    log(f"  {'step':>4s} {'tokens':>6s} {'reqs':>4s} {'ctx':>5s} " + " ".join(f"{n:>26s}" for n in names))
    for i, st in enumerate(case["schedule"]):
        log(f"  {i:4d} {st['tokens']:6d} {st['batch']:4d} {st['context']:5d} "
            + " ".join(f"{fmt(paths[n]['steps'][i]['wall_ms'], '26.3f')}" for n in names))
    log(f"  {'':4s} {'host share':>17s} " + " ".join(
        f"{fmt(100 * paths[n]['host_share'] if paths[n].get('host_share') is not None else None, '25.0f'):>25s}%"
        for n in names))
    w = case.get("work")
    if w:
        log("")
        log(f"useful work, {cfg.layers} layers: attention {w['attention_tflop']:.2f} + up-projection "
            f"{w['up_projection_tflop']:.2f} = {w['total_tflop']:.2f} TFLOP"
            + (f"; at this run's matrix-product ceiling ({w['ceiling_tflops']:.0f} TFLOP/s) "
               f"{w['ms_at_ceiling']:.2f} ms" if w.get("ms_at_ceiling") else ""))
        for n in names:
            tf, pct = rate_of(w, paths[n]["total_wall_ms"])
            paths[n]["work_tflops"], paths[n]["work_pct_ceiling"] = tf, pct
            log(f"  {n:26s} {fmt(tf, '7.1f')} TFLOP/s over the wall time"
                + (f" ({pct:.1f}% of the ceiling)" if pct is not None else ""))
    seeds = SEED_TTFT.get((case["requests"], case["budget"])) if args.prompt == 999 else None
    for n in names:
        log("")
        log(serving_block(case["requests"], case["prompt"], case["budget"], cfg.layers, n, paths[n],
                          (seeds or {}).get(n)))
    # Speedups of every mlakit path over the FA2 and FlashInfer paths (total wall of the schedule).
    sp = {}
    for m in [x for x in names if x.startswith("mlakit")]:
        for peer in ("fa2_vllm", "flashinfer_fa3", "flashinfer_fa3_host", "flashinfer_fa2"):
            if peer in paths and paths[m]["total_wall_ms"] and paths[peer]["total_wall_ms"]:
                sp.setdefault(m, {})["vs_" + peer] = paths[peer]["total_wall_ms"] / paths[m]["total_wall_ms"]
    case["speedups"] = sp
    # Each mlakit step path on an FP8 cache against the same path on the bf16 cache.
    fp8 = {}
    for m in names:
        base = m.partition("@")[0]
        if "@" in m and base in paths and paths[m]["total_wall_ms"] and paths[base]["total_wall_ms"]:
            fp8[m] = paths[m]["total_wall_ms"] / paths[base]["total_wall_ms"]
    case["fp8_cache_vs_bf16_cache"] = fp8
    # Each mlakit step path with absorbed requests against the same path up-projecting every
    # request ("<path>/a0"): the speed-up the per-request choice gives (>= 1 is faster).
    absorb = {}
    for m in names:
        head, _, a = m.partition("/a")
        up = f"{head}/a0"
        if a and a != "0" and up in paths and paths[m]["total_wall_ms"] and paths[up]["total_wall_ms"]:
            absorb[m] = paths[up]["total_wall_ms"] / paths[m]["total_wall_ms"]
    case["absorbed_vs_up_projection"] = absorb
    if absorb:
        log("")
        log(f"up-projection only / with absorbed requests, total wall (N={case['requests']}, budget "
            f"{case['budget']}):")
        for m, r in absorb.items():
            log(f"  {m:36s} x{r:.3f} over {m.partition('/a')[0]}/a0")
    if fp8:
        log("")
        log(f"FP8 cache / bf16 cache, total wall (N={case['requests']}, budget {case['budget']}; target <= "
            f"{FP8_CACHE_TARGET:.2f}):")
        for m, r in fp8.items():
            log(f"  {m:36s} x{r:.3f} of {m.partition('@')[0]}")
    if sp:
        log("")
        log(f"speedup (peer total wall / mlakit total wall), N={case['requests']}, budget {case['budget']}:")
        for m, d in sp.items():
            log(f"  {m:26s} " + "  ".join(f"{k} x{v:.2f}" for k, v in d.items()))


def report_targets(cases):
    """The targets, for the best mlakit path available (a graph-replayed step first)."""
    by = {(c["requests"], c["budget"]): c for c in cases}
    rows = []
    for key, peer, want in TARGETS:
        c = by.get(key)
        if not c:
            continue
        for m in MLAKIT_PATHS_PREF:
            v = (c.get("speedups") or {}).get(m, {}).get("vs_" + peer)
            if v is not None:
                # What the target asks of mlakit's step in this run: the peer's time / the ratio,
                # as a rate of the useful work.
                need_ms = c["paths"][peer]["total_wall_ms"] / want
                tf, pct = rate_of(c["work"], need_ms) if c.get("work") else (None, None)
                rows.append({"case": f"N={key[0]} budget {key[1]}", "mlakit_path": m, "vs": peer,
                             "speedup": v, "target": want, "met": v >= want, "needs_ms": need_ms,
                             "needs_tflops": tf, "needs_pct_ceiling": pct})
                break
    for c in cases:
        # Every graph-replayed mlakit step path measured (both plan uploads when both ran); the
        # kernel-in-vLLM graph only when no step path ran.
        found = False
        for m in ("mlakit_step_graph", "mlakit_step_graph_uir", "mlakit_step_graph_native",
                  "mlakit_kernel_in_vllm_path_graph"):
            r = c["paths"].get(m, {})
            if r.get("host_share") is not None and not (found and m == "mlakit_kernel_in_vllm_path_graph"):
                rows.append({"case": f"N={c['requests']} budget {c['budget']}", "mlakit_path": m,
                             "vs": "host share", "speedup": r["host_share"], "target": HOST_SHARE_TARGET,
                             "met": r["host_share"] < HOST_SHARE_TARGET,
                             "replay_only": r.get("host_share_replay_only")})
                found = True
    for c in cases:
        if (c["requests"], c["budget"]) != ABSORB_TARGET_CASE:
            continue
        for m, r in (c.get("absorbed_vs_up_projection") or {}).items():
            rows.append({"case": f"N={c['requests']} budget {c['budget']}", "mlakit_path": m,
                         "vs": m.partition("/a")[0] + "/a0", "speedup": r, "target": ABSORB_TARGET,
                         "met": r >= ABSORB_TARGET})
    for c in cases:
        for m, ratio in (c.get("fp8_cache_vs_bf16_cache") or {}).items():
            # As a speed-up (bf16 cache time / FP8 cache time), met at >= 1 / FP8_CACHE_TARGET.
            rows.append({"case": f"N={c['requests']} budget {c['budget']}", "mlakit_path": m,
                         "vs": m.partition("@")[0] + " (bf16 cache)", "speedup": 1.0 / ratio,
                         "target": round(1.0 / FP8_CACHE_TARGET, 3), "met": ratio <= FP8_CACHE_TARGET})
    if rows:
        log("")
        log("targets (mlakit_kernel_in_vllm_path* is mlakit's kernel in vLLM's path, not the MLA step):")
        for r in rows:
            if r["vs"] == "host share":
                log(f"  {r['case']:22s} {r['mlakit_path']:26s} host share {100 * r['speedup']:.1f}% "
                    f"(target < {100 * r['target']:.0f}%): {'met' if r['met'] else 'MISSED'}"
                    + (f"  [replay-only reading {100 * r['replay_only']:.1f}%]" if r.get("replay_only") is not None else ""))
            else:
                log(f"  {r['case']:22s} {r['mlakit_path']:26s} vs {r['vs']:16s} x{r['speedup']:.2f} "
                    f"(target x{r['target']:.2f}): {'met' if r['met'] else 'MISSED'}"
                    + (f"  [needs <= {r['needs_ms']:.2f} ms: {r['needs_tflops']:.0f} TFLOP/s"
                       + (f", {r['needs_pct_ceiling']:.0f}% of the ceiling" if r.get("needs_pct_ceiling") else "")
                       + "]" if r.get("needs_tflops") else ""))
    return rows


if __name__ == "__main__":
    sys.exit(main())
