#!/usr/bin/env python3
"""Host cost of MlaStep.plan() from Python, per input form (what an engine passes), for the seed's
first steps: N=1 (one 999-token request) and N=100 at budget 8192 (8 new requests + one cut at
the budget, and a step with context). The graph-replayed N=1 step spends its non-busy time here.

    python3 bench/mla_plan_cost.py [--device cuda|cpu] [--iters 2000] [--after-sync]

--after-sync times each plan() the way a serving step meets it: right after the host has waited
for about a millisecond of GPU work (torch.cuda._sleep, then synchronize), so with the caches and
the driver as the step's wait leaves them, not in a hot loop (CUDA only).
"""
import argparse
import statistics
import time

import numpy as np

import mlakit


def make_step(device):
    """The step both plan() probes time (this one and mla_plan_split_probe.py): the reference
    configuration's 16 heads, capacities of the seed's budget-8192 steps."""
    return mlakit.MlaStep(16, dtype="bf16", device=device, block_size=16, num_blocks=8192, max_batch=256,
                          max_tokens=8192, max_context_tokens=8192)


def make_gpu_wait(torch, spin=False):
    """A wait for ~1 ms of GPU work, as a serving step's host meets plan(): torch.cuda.synchronize()
    (as compare_mla.py's steps end), or with spin the host polling an event (never blocking)."""
    ev = torch.cuda.Event()

    def wait_gpu():
        torch.cuda._sleep(2_000_000)  # ~1 ms of GPU clock cycles
        if not spin:
            torch.cuda.synchronize()
            return
        ev.record()
        while not ev.query():
            pass
    return wait_gpu


def med_p90(xs):
    """'median (p90)' of samples in seconds, in microseconds."""
    return f"{statistics.median(xs) * 1e6:7.1f} ({sorted(xs)[int(0.9 * (len(xs) - 1))] * 1e6:6.1f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--after-sync", action="store_true")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    step = make_step(args.device)
    cases = {
        "N=1 (999 new)": ([999], [0]),
        "N=100 step 1 (8x999 + 200)": ([999] * 8 + [200], [0] * 9),
        "N=100 step 2 (799 after 200 ctx + 7x999 + 394)": ([799] + [999] * 7 + [400], [200] + [0] * 8),
    }
    wait_gpu = None
    if args.after_sync:
        if torch is None or args.device == "cpu" or not torch.cuda.is_available():
            raise SystemExit("--after-sync needs torch with CUDA")
        wait_gpu = make_gpu_wait(torch)
    mode = "after ~1 ms GPU wait + sync" if args.after_sync else "back to back"
    print(f"device {args.device}; {mode}; median (p90) of {args.iters} plan() calls, microseconds")
    for name, (q, ctx) in cases.items():
        cols = max(-(-(a + b) // 16) for a, b in zip(q, ctx))
        bt = np.arange(len(q) * cols, dtype=np.int32).reshape(len(q), cols)
        forms = {"numpy int32": bt, "list of lists": bt.tolist()}
        if torch is not None:
            forms["torch cpu int32"] = torch.from_numpy(bt)
        for gr in (0, 8192 + 1024):
            for fname, table in forms.items():
                ts = []
                for _ in range(args.iters):
                    if wait_gpu is not None:
                        wait_gpu()
                    t0 = time.perf_counter()
                    step.plan(q, ctx, table, graph_rows=gr)
                    ts.append(time.perf_counter() - t0)
                print(f"  {name:48s} graph_rows={gr:5d} {fname:16s} {med_p90(ts)}")


if __name__ == "__main__":
    main()
