"""Energy, clock and cycles per launch of prefill kernels, each run alone and sustained.

Under the H100's power cap the SM clock falls while a long launch runs back to back, so two
kernels that take the same cycles can differ in time by their clocks, and a kernel that spends
less energy per tile keeps a higher clock. compare.py --clocks samples the clock while each
method's 30 timed calls run, but those last 30-460 ms, NVML's power reading averages about a
second, and the second method always starts on a card the first has heated. This tool instead
gives each method the card alone for --seconds of back-to-back launches after --rest seconds
idle, the methods in turns (turn t starts at method t), and reads:

  ms      device time per launch (CUDA events around the whole window / launches), and over the
          window's second half alone (ms_late: the clock has settled by then)
  J       NVML's energy counter (nvmlDeviceGetTotalEnergyConsumption, mJ) across the window,
          per launch; W = its mean power
  MHz     median SM clock of the samples taken in the window (bench/gpu_clock.py), and in its
          second half (mhz_late)
  Mcyc    ms_late x mhz_late: a launch's length in SM cycles once the clock has settled. Equal
          Mcyc and unequal ms means the clock, not the kernel's cycles, separates two methods.

  python3 bench/diagnostics/prefill_energy.py --workload 1x16384 --workload v3_128h_8192 \\
      --methods mlakit,flashinfer_fa3 --seconds 4 --rest 3 --turns 2 --json energy.json

Methods, workloads and inputs are compare.py's (every output checked against its float32
reference once before the timed windows). A row's figures are the median over its turns.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, BENCH)
import compare as C  # noqa: E402  (its workloads, inputs, methods, reference and turn order)


def summarize(launches, dev_ms, late_launches, late_ms, energy_mj, clocks, clocks_late):
    """A window's figures from its raw counts: launches and device ms over the whole window and
    its second half, the energy counter's difference (mJ), and gpu_clock's window stats (or None)."""
    if launches <= 0 or dev_ms <= 0:
        raise ValueError("a window needs at least one launch and some device time")
    ms = dev_ms / launches
    ms_late = late_ms / late_launches if late_launches > 0 else ms
    out = {"launches": launches, "ms": ms, "ms_late": ms_late,
           "j_per_launch": energy_mj / 1e3 / launches if energy_mj is not None else None,
           "power_w": energy_mj / dev_ms if energy_mj is not None else None,
           "mhz": clocks["sm_clock_mhz"] if clocks else None,
           "mhz_late": clocks_late["sm_clock_mhz"] if clocks_late else None}
    mhz = out["mhz_late"] or out["mhz"]
    out["mcycles"] = ms_late * mhz / 1e3 if mhz else None  # ms x MHz = thousands of cycles
    return out


def median_of_turns(turns):
    """Each figure's median over a method's turns (None where a turn lacks it)."""
    keys = turns[0].keys()
    med = {}
    for k in keys:
        xs = [t[k] for t in turns if t.get(k) is not None]
        med[k] = statistics.median(xs) if xs else None
    med["turns"] = len(turns)
    return med


class Energy:
    """NVML's total-energy counter (mJ since the driver loaded); None where NVML is missing."""

    def __init__(self, index=0):
        try:
            import pynvml
            pynvml.nvmlInit()
            self._n, self._h = pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
            self.read()
        except Exception:  # noqa: BLE001
            self._n = None

    def read(self):
        return None if self._n is None else float(self._n.nvmlDeviceGetTotalEnergyConsumption(self._h))

    def temperature(self):
        return None if self._n is None else self._n.nvmlDeviceGetTemperature(self._h, 0)


def sustained(torch, run, nsets, seconds, sampler, energy, batch_ms=20.0):
    """Back-to-back launches of run(i) for `seconds`, the host at most two batches ahead."""
    for i in range(3):
        run(i % nsets)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    run(0)
    b.record()
    b.synchronize()
    per_batch = max(1, math.ceil(batch_ms / max(a.elapsed_time(b), 1e-3)))
    events = []  # (launches so far, event after them, host time)
    e0 = energy.read()
    t0 = time.perf_counter()
    start = torch.cuda.Event(enable_timing=True)
    start.record()
    n = 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(per_batch):
            run(n % nsets)
            n += 1
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        events.append((n, ev, time.perf_counter()))
        if len(events) > 2:
            events[-3][1].synchronize()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    e1 = energy.read()
    half = events[len(events) // 2]
    dev_ms = start.elapsed_time(events[-1][1])
    late_ms = half[1].elapsed_time(events[-1][1])
    clocks = sampler.stats(t0, t1) if sampler else None
    clocks_late = sampler.stats(half[2], t1) if sampler else None
    mj = e1 - e0 if e0 is not None and e1 is not None else None
    return summarize(n, dev_ms, n - half[0], late_ms, mj, clocks, clocks_late)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", action="append", required=True, help="compare.py's named workloads")
    ap.add_argument("--methods", default="mlakit,flashinfer_fa3")
    ap.add_argument("--seconds", type=float, default=4.0, help="each window's back-to-back launches")
    ap.add_argument("--rest", type=float, default=3.0, help="idle seconds before each window")
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.turns < 1 or args.seconds <= 0 or args.rest < 0:
        ap.error("--turns >= 1, --seconds > 0, --rest >= 0")
    import gpu_clock
    import torch
    if not torch.cuda.is_available():
        print("prefill_energy.py: no CUDA device")
        return 1
    dev = torch.device("cuda")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    mlakit_mod = None
    if "mlakit" in methods:
        import mlakit as mlakit_mod
    if any(m in C.FI_BACKENDS for m in methods):
        fi, info = C.peers.load_flashinfer(auto_setup=True)
        C.FI_STATE.update(mod=fi, why=info, info=info if fi else None)
    opts = types.SimpleNamespace(fi_allow_jit=False, flex_max_elems=0)
    sampler = gpu_clock.ClockSampler(period_s=0.01)
    energy = Energy()
    env = {"gpu": torch.cuda.get_device_properties(0).name, "torch": torch.__version__,
           "energy_counter": energy.read() is not None, "clocks": sampler.source}
    print(f"env: {env}", flush=True)
    rows = []
    for name in args.workload:
        w = C.W.find(name)
        if w is None:
            ap.error(f"unknown workload {name!r}")
        nsets = max(1, min(8, math.ceil(2 * C.L2_BYTES / w.bytes_per_set())))
        sets = C.make_sets(torch, w, nsets, dev, args.seed)
        check_rows = C.sample_rows(w, 64, args.seed + 1)
        heads = C.check_heads(w)
        ref = C.reference(torch, w, *sets[0], check_rows, heads)
        built = {}
        for m in methods:
            try:
                run, to_ragged, ctx = C.build_method(torch, m, w, sets, None, dev, mlakit_mod, opts)[:3]
            except C.Skip as ex:
                print(f"{w.name} {m}: skipped ({ex})", flush=True)
                continue
            err = C.relerr(torch, to_ragged(run(0)), ref, check_rows, heads)
            print(f"{w.name} {m}: relerr {err:.2e}", flush=True)
            if not err <= 1e-2:
                raise SystemExit(f"{w.name} {m}: output off the reference ({err})")
            built[m] = run
        turns = {m: [] for m in built}
        for order in C.turn_orders(list(built), args.turns):
            for m in order:
                torch.cuda.synchronize()
                time.sleep(args.rest)
                t_start = energy.temperature()
                r = sustained(torch, built[m], nsets, args.seconds, sampler, energy)
                r["temp_start"], r["temp_end"] = t_start, energy.temperature()
                turns[m].append(r)
                print(f"{w.name} {m}: {r['ms']:.4f} ms (late {r['ms_late']:.4f}), "
                      f"{r['mhz']} MHz (late {r['mhz_late']}), {r['power_w'] or 0:.0f} W, "
                      f"{r['j_per_launch'] or 0:.4f} J, {r['mcycles'] or 0:.3f} Mcyc, "
                      f"{r['temp_start']}-{r['temp_end']} C", flush=True)
        for m, ts in turns.items():
            rows.append({"workload": w.name, "method": m, "gflop": w.flops() / 1e9, **median_of_turns(ts),
                         "per_turn": ts})
    sampler.close()
    print("\n| workload | method | ms | ms late | MHz late | W | J / launch | Mcycles / launch |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        f = lambda x, s: "-" if x is None else format(x, s)  # noqa: E731
        print(f"| {r['workload']} | {r['method']} | {f(r['ms'], '.4f')} | {f(r['ms_late'], '.4f')} | "
              f"{f(r['mhz_late'], '.0f')} | {f(r['power_w'], '.0f')} | {f(r['j_per_launch'], '.4f')} | "
              f"{f(r['mcycles'], '.3f')} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"env": env, "args": vars(args), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
