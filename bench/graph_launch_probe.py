#!/usr/bin/env python3
"""How long a CUDA graph launch keeps the host (and so the GPU) waiting, by node count and kind.

The graph-replayed MLA step at N=1 (bench/compare_mla.py) spends most of its non-busy time
before its first kernel: plan() and the launch of one graph of 27 layers x 3 nodes. This probe
times replay() on the host (synchronized before, so nothing queues) for graphs of N tiny
elementwise kernels and of N/3 x (elementwise, matmul, elementwise), N = 27 .. 162, so a step's
launch cost can be read as a per-node figure.

    python3 bench/graph_launch_probe.py [--reps 200]
"""
import argparse
import statistics
import time

import torch


def probe(build, reps):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        build()  # warm-up outside the capture (cuBLAS handles, kernels loaded)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        build()
    g.replay()
    torch.cuda.synchronize()
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


if __name__ == "__main__":
    main()
