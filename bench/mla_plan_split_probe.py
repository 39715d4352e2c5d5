#!/usr/bin/env python3
"""Where MlaStep.plan()'s host time goes from Python right after the host has waited for the GPU
(what a serving step meets), piece by piece: each piece is timed alone, after its own ~1 ms GPU
wait, and again back to back (hot). Medians in microseconds.

    python3 bench/mla_plan_split_probe.py [--iters 300] [--wait sync|spin]

--wait sync: torch.cuda.synchronize() (as compare_mla.py's steps end); spin: the host polls an
event (the thread never blocks). The C++ side of the same plan: `mlakit-bench seed --host-probe`.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mla_plan_cost import make_gpu_wait, make_step, med_p90  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--wait", choices=["sync", "spin"], default="sync")
    args = ap.parse_args()
    import torch
    from mlakit import _stream_handle
    from mlakit.mla import _flat_block_table

    step = make_step("cuda")
    q, ctx = [999], [0]
    bt_np = np.arange(64, dtype=np.int32).reshape(1, 64)
    bt = torch.from_numpy(bt_np)
    graph_rows = 1024
    flat, cols = _flat_block_table(bt)
    stream = _stream_handle(None, device="cuda")
    raw = torch._C._cuda_getCurrentRawStream

    def noop():
        return None

    pieces = {
        "two clock reads": lambda: None,
        "a Python no-op call": noop,
        "torch current raw stream": lambda: raw(0),
        "_flat_block_table (torch cpu)": lambda: _flat_block_table(bt),
        "_stream_handle(device='cuda')": lambda: _stream_handle(None, device="cuda"),
        "native _impl.plan (args ready)": lambda: step._impl.plan(q, ctx, flat, cols, None, 0.0, graph_rows,
                                                                  stream, None),
        "MlaStep.plan (torch cpu table)": lambda: step.plan(q, ctx, bt, graph_rows=graph_rows),
        "MlaStep.plan (numpy table)": lambda: step.plan(q, ctx, bt_np, graph_rows=graph_rows),
    }

    wait_gpu = make_gpu_wait(torch, spin=args.wait == "spin")

    def timed(fn):
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    rows = {name: ([], []) for name in pieces}
    for _ in range(args.iters):
        for name, fn in pieces.items():  # interleaved, so drifts of the host hit every piece alike
            wait_gpu()
            rows[name][0].append(timed(fn))
            rows[name][1].append(timed(fn))
    print(f"wait: {args.wait}; median (p90) of {args.iters}, microseconds; 'after wait' = first call after "
          f"~1 ms GPU wait, 'hot' = the same call right after it")
    print(f"  {'piece':40s} {'after wait':>18s} {'hot':>18s}")
    for name, (cold, hot) in rows.items():
        print(f"  {name:40s} {med_p90(cold):>18s} {med_p90(hot):>18s}")


if __name__ == "__main__":
    main()
