#!/usr/bin/env python3
"""Where the host time of a graph-replayed MLA step goes, outside bench/compare_mla.py's harness.

One MlaStep (H=16, DeepSeek-V2-Lite's MLA shapes), 27 layers captured into one CUDA graph at
N=1 x 999 tokens. Each timed step: ~1 ms of GPU work and a synchronize (the state a serving step
leaves the host in), then plan() and replay(), each timed on the host, then a synchronize, also
timed (the GPU's step). Also: replay() without a plan() before it, and plan() alone.

    python3 bench/mla_graph_host_probe.py [--reps 50] [--tokens 999]
"""
import argparse
import statistics
import time

import torch

import mlakit
from graph_launch_probe import capture
from seed_schedule import graph_bucket

LAYERS, H, RANK, ROPE, NOPE, V, BS = 27, 16, 512, 64, 128, 128, 16


def med(xs):
    return statistics.median(xs) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=999)
    args = ap.parse_args()
    dev, dt, T = "cuda", torch.bfloat16, args.tokens
    blocks = -(-T // BS)
    step = mlakit.MlaStep(H, dtype="bf16", device=dev, block_size=BS, num_blocks=blocks + 8, max_batch=256,
                          max_tokens=8192, max_context_tokens=8192)
    g = torch.Generator(device=dev).manual_seed(0)
    rnd = lambda *s: torch.randn(*s, device=dev, dtype=dt, generator=g) * 0.1  # noqa: E731
    L = [dict(q=rnd(T, H, NOPE + ROPE), kv_c=rnd(T, RANK), k_pe=rnd(T, ROPE), w=rnd(H * (NOPE + V), RANK),
              cache=torch.zeros(blocks + 8, BS, RANK + ROPE, device=dev, dtype=dt)) for _ in range(LAYERS)]
    out = torch.empty(T, H, V, device=dev, dtype=dt)
    q_lens, ctx_lens = [T], [0]
    table = torch.arange(blocks, dtype=torch.int32).reshape(1, blocks)
    rows = graph_bucket(T, 9216)  # the token bucket compare_mla uses for this step

    def plan():
        step.plan(q_lens, ctx_lens, table, graph_rows=rows)

    def layers():
        for x in L:
            step.run(x["q"], x["kv_c"], x["k_pe"], x["w"], x["cache"], out=out)

    plan()
    graph = capture(layers)

    def wait_gpu():
        torch.cuda._sleep(2_000_000)
        torch.cuda.synchronize()

    res = {}
    for mode in ("plan+replay", "replay only", "plan only", "plan+replay hot"):
        tp, tr, ts = [], [], []
        for _ in range(args.reps):
            if mode != "plan+replay hot":
                wait_gpu()
            t0 = time.perf_counter()
            if mode != "replay only":
                plan()
            t1 = time.perf_counter()
            if mode != "plan only":
                graph.replay()
            t2 = time.perf_counter()
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            tp.append(t1 - t0)
            tr.append(t2 - t1)
            ts.append(t3 - t0)
        res[mode] = (med(tp), med(tr), med(ts))
    print(f"N=1 x {T} tokens (graph_rows {rows}), {LAYERS} layers in one graph; medians of {args.reps}, microseconds")
    print(f"  {'mode':18s} {'plan()':>8s} {'replay()':>9s} {'to sync':>9s}")
    for mode, (p, r, s) in res.items():
        print(f"  {mode:18s} {p:8.1f} {r:9.1f} {s:9.1f}")


if __name__ == "__main__":
    main()
