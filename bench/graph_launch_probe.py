#!/usr/bin/env python3
"""How long a CUDA graph launch keeps the host (and so the GPU) waiting, by node count and kind.

The graph-replayed MLA step at N=1 (bench/compare_mla.py) spends most of its non-busy time
before its first kernel: plan() and the launch of one graph of 27 layers x 3 nodes. This probe
times replay() on the host (synchronized before, so nothing queues) for graphs of N tiny
elementwise kernels and of N/3 x (elementwise, matmul, elementwise), N = 27 .. 162, so a step's
launch cost can be read as a per-node figure. With --mlakit, also graphs of mlakit's own launches:
27 ragged prefill runs (the sm90 kernel alone, 999 tokens) and 27 MLA step layers (N=1, 999
tokens), and the node types of the latter (CUDA graph debug dump).

    python3 bench/graph_launch_probe.py [--reps 200] [--mlakit]
"""
import argparse
import statistics
import time

import torch


def capture(build, dump=None):
    """build() captured into a CUDA graph after one eager pass on a side stream (cuBLAS handles,
    kernels loaded), replayed once and synchronized."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        build()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    if dump:
        g.enable_debug_mode()
    with torch.cuda.graph(g):
        build()
    if dump:
        g.debug_dump(dump)
    g.replay()
    torch.cuda.synchronize()
    return g


def probe(build, reps, dump=None):
    g = capture(build, dump)
    host, wall = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        g.replay()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) * 1e6)
        wall.append((t2 - t0) * 1e6)
    return statistics.median(host), statistics.median(wall)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--mlakit", action="store_true")
    args = ap.parse_args()
    x = torch.zeros(1024, device="cuda")
    a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    print(f"{'graph':34s} {'replay() host us':>17s} {'replay+sync us':>15s} {'host us/node':>13s}")
    for n in (27, 81, 162):
        def tiny(n=n):
            for _ in range(n):
                x.add_(1.0)
        def mixed(n=n):
            for _ in range(n // 3):
                x.add_(1.0)
                torch.mm(a, b)
                x.mul_(0.5)
        for name, fn in ((f"{n} elementwise", tiny), (f"{n // 3} x (elementwise, mm, elementwise)", mixed)):
            h, w = probe(fn, args.reps)
            print(f"{name:34s} {h:17.1f} {w:15.1f} {h / n:13.2f}")
    if args.mlakit:
        mlakit_graphs(args.reps)


def mlakit_graphs(reps):
    import collections
    import re

    import mlakit
    T, H, L, BS, RANK, ROPE = 999, 16, 27, 16, 512, 64
    dev, dt = "cuda", torch.bfloat16
    rnd = lambda *s: torch.randn(*s, device=dev, dtype=dt) * 0.1  # noqa: E731
    q, k, v = rnd(T, H, 192), rnd(T, H, 192), rnd(T, H, 128)
    out = torch.empty(T, H, 128, device=dev, dtype=dt)
    rp = mlakit.RaggedPrefill(H, H, 192, 128, dtype="bf16", device=dev, max_batch=16, max_q_tokens=8192,
                              max_kv_tokens=8192)
    rp.plan([0, T], [0, T], causal=True)

    def prefill_only():
        for _ in range(L):
            rp.run(q, k, v, out=out)
    blocks = -(-T // BS)
    step = mlakit.MlaStep(H, dtype="bf16", device=dev, block_size=BS, num_blocks=blocks + 8, max_batch=16,
                          max_tokens=1024, max_context_tokens=1024)
    step.plan([T], [0], torch.arange(blocks, dtype=torch.int32).reshape(1, blocks), graph_rows=1024)
    lay = [(rnd(T, H, 192), rnd(T, RANK), rnd(T, ROPE), rnd(H * 256, RANK),
            torch.zeros(blocks + 8, BS, RANK + ROPE, device=dev, dtype=dt)) for _ in range(L)]

    def mla_layers():
        for x in lay:
            step.run(*x, out=out)
    for name, fn, n, dump in ((f"{L} mlakit ragged prefill runs", prefill_only, L, None),
                              (f"{L} mlakit MLA step layers", mla_layers, 3 * L, "/tmp/mla_graph.dot")):
        h, w = probe(fn, reps, dump)
        print(f"{name:34s} {h:17.1f} {w:15.1f} {h / n:13.2f}")
    try:
        dot = open("/tmp/mla_graph.dot").read()
        kinds = collections.Counter(re.findall(r"\b(KERNEL|MEMSET|MEMCPY|HOST|EMPTY|EVENT_RECORD|WAIT_EVENT|"
                                               r"MEM_ALLOC|MEM_FREE|CONDITIONAL)\b", dot))
        names = collections.Counter(m[:60] for m in re.findall(r"\\n(?:[a-z_:0-9<>]*?)?([_A-Za-z][_A-Za-z0-9]{6,})\(", dot))
        print("MLA step graph nodes by type:", dict(kinds))
        print("kernel names (first 60 chars):", dict(names.most_common(8)))
        edges = dot.count("->")
        print(f"edges {edges}; dot {len(dot)} bytes; programmatic edges: {dot.count('rogrammatic')}")
    except OSError as ex:
        print("no graph dump:", ex)


if __name__ == "__main__":
    main()
