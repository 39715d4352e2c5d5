#!/usr/bin/env python3
"""Where the MLA step's absorbed requests pay: one layer of mlakit.MlaStep on batches of B
requests that each bring q new tokens over a context of ctx cached tokens, run with every request
up-projected (absorb_max_query_len=0) and with every request attended in latent space
(absorb_max_query_len=q), side by side in one process.

Each (heads, ctx, q) is one step planned once. On CUDA one layer's run is captured into a CUDA
graph and replayed --reps times back to back between events; on the CPU (--device cpu) run() is
called --reps times; the two forms in turns, the reading the median per run. The crossover of a
(heads, ctx) is the largest q at which the absorbed form is still faster: what
MlaConfig::absorb_max_query_len = -1 takes per backend (docs/mla.md). Bytes and FLOPs are not
reported: the two forms do different work for the same result.

    python3 bench/mla_absorb_crossover.py                      # about a minute on an H100
    python3 bench/mla_absorb_crossover.py --json crossover.json --heads 16,128 --ctx 1024,4096
    python3 bench/mla_absorb_crossover.py --device cpu --heads 16 --ctx 1024 --batch 4
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch

import mlakit

L, R, DN, DV, BS = 512, 64, 128, 128, 64


def log(msg=""):
    print(msg, flush=True)


class Case:
    """B requests of q new tokens over ctx cached tokens: the layer's tensors and a cache."""

    def __init__(self, heads, batch, q, ctx, gen, dev):
        self.heads, self.batch, self.q, self.ctx, self.dev = heads, batch, q, ctx, dev
        pages = -(-(ctx + q) // BS)
        self.num_blocks = batch * pages
        perm = torch.randperm(self.num_blocks, generator=gen)
        self.block_table = perm.view(batch, pages).to(torch.int32)
        t = batch * q
        g = dict(generator=gen)
        self.q_t = torch.randn(t, heads, DN + R, **g).to(dev, torch.bfloat16)
        self.kv_c = torch.randn(t, L, **g).to(dev, torch.bfloat16)
        self.k_pe = torch.randn(t, R, **g).to(dev, torch.bfloat16)
        self.w = (torch.randn(heads * (DN + DV), L, **g) / math.sqrt(L)).to(dev, torch.bfloat16)
        self.cache = torch.randn(self.num_blocks, BS, L + R, **g).to(dev, torch.bfloat16)
        self.out = torch.empty(t, heads, DV, device=dev, dtype=torch.bfloat16)

    def step(self, absorb):
        s = mlakit.MlaStep(self.heads, dtype=torch.bfloat16, device=self.dev.type, block_size=BS,
                           num_blocks=self.num_blocks, max_batch=self.batch, max_tokens=self.batch * self.q,
                           max_context_tokens=self.batch * self.ctx, absorb_max_query_len=absorb,
                           max_absorbed_tokens=self.batch * self.q)
        s.plan([self.q] * self.batch, [self.ctx] * self.batch, self.block_table)
        want = self.batch if absorb else 0
        if s.info.absorbed_requests != want:
            raise RuntimeError(f"absorb {absorb}: {s.info.absorbed_requests} requests absorbed, expected {want}")
        return s

    def run(self, s):
        s.run(self.q_t, self.kv_c, self.k_pe, self.w, self.cache, out=self.out)


class Eager:
    """A CPU step's run, called as a graph is replayed."""

    def __init__(self, case, s):
        self.replay = lambda: case.run(s)


def graph_of(case, s):
    if case.dev.type != "cuda":
        return Eager(case, s)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        case.run(s)  # one eager run: handles, kernel attributes
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        case.run(s)
    return g


def time_graphs(graphs, reps, rounds, cuda):
    """Median ms per replay of each graph, the graphs in turns."""
    times = [[] for _ in graphs]
    if cuda:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(rounds):
        for i, g in enumerate(graphs):
            g.replay()
            if cuda:
                e0.record()
            t0 = time.perf_counter()
            for _ in range(reps):
                g.replay()
            if cuda:
                e1.record()
                e1.synchronize()
                times[i].append(e0.elapsed_time(e1) / reps)
            else:
                times[i].append((time.perf_counter() - t0) * 1e3 / reps)
    return [statistics.median(t) for t in times]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", default="16,128")
    ap.add_argument("--ctx", default="1024,4096")
    ap.add_argument("--q", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--batch", type=int, default=32, help="requests per step (default 32)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        log("mla_absorb_crossover.py: no CUDA device (--device cpu runs the CPU backend)")
        return 1
    heads = [int(x) for x in args.heads.split(",")]
    ctxs = [int(x) for x in args.ctx.split(",")]
    qs = [int(x) for x in args.q.split(",")]
    try:
        commit = os.environ.get("MLAKIT_GIT_COMMIT") or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    name = torch.cuda.get_device_name(0) if cuda else f"CPU, {torch.get_num_threads()} threads"
    log(f"{name}; mlakit {getattr(mlakit, '__version__', '?')} at {commit}; "
        f"batch {args.batch}, page {BS}, bf16; one layer" + (", graph-replayed" if cuda else ""))
    gen = torch.Generator().manual_seed(0)
    rows, crossover = [], {}
    for h in heads:
        for ctx in ctxs:
            log(f"\n== heads {h}, context {ctx}: ms per layer (up-projection / absorbed)")
            last_win = 0
            for q in qs:
                case = Case(h, args.batch, q, ctx, gen, dev)
                up, ab = case.step(0), case.step(q)
                g_up, g_ab = graph_of(case, up), graph_of(case, ab)
                t_up, t_ab = time_graphs([g_up, g_ab], args.reps, args.rounds, cuda)
                ratio = t_up / t_ab
                if ratio > 1.0:
                    last_win = q
                rows.append({"heads": h, "ctx": ctx, "q": q, "batch": args.batch, "up_ms": t_up, "absorbed_ms": t_ab,
                             "absorbed_speedup": ratio})
                log(f"  q {q:4d}: {t_up:8.3f} / {t_ab:8.3f}  absorbed x{ratio:.2f}")
                del g_up, g_ab, up, ab, case
                if cuda:
                    torch.cuda.empty_cache()
            crossover[f"h{h}_ctx{ctx}"] = last_win
            log(f"  crossover: absorbed faster up to q = {last_win}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "commit": commit,
                       "date": datetime.date.today().isoformat(), "batch": args.batch, "page": BS,
                       "rows": rows, "crossover": crossover}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
