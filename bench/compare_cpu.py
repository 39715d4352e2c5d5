#!/usr/bin/env python3
"""mlakit's CPU backend against PyTorch on the CPU, in one process.

Attention: bf16, H=16, (Dqk, Dvo) = (192, 128), the issue's shapes (1x2048 causal, 1x1024
non-causal, 512 q vs 2048 kv non-causal, 8x256 causal, 4x999 causal). mlakit runs them as one
ragged batch (RaggedPrefill, planned once) on each of its bf16 paths this machine has, forced in
turn with MLAKIT_CPU_ISA (read at every run): amx and avx512bf16 beside it on a CPU with AMX,
avx512bf16 alone without. PyTorch runs a dense batch [B, H, L, D] (the ragged shapes have equal
lengths) two ways:
  torch_sdpa   torch.nn.functional.scaled_dot_product_attention with V of 128 (the call as written)
  torch_flash  PyTorch's CPU flash-attention kernel (aten::_scaled_dot_product_flash_attention_for_cpu),
               which needs V padded to 192 as vLLM's FA2 path pads it; output sliced back to 128.
               The peer: the ratios are mlakit's best path against it.
GFLOP/s count visible (query, key) pairs only: 2 * (192 + 128) * pairs * H. The bf16 matrix-product
ceiling (torch.matmul 2048^3, oneDNN) is measured in the same run; "% ceil" is against it.
Threads (--threads-list, default all cores, 4 and 1): each path and PyTorch's flash kernel on the
long shapes at each count, in turns (MLAKIT_CPU_THREADS and torch.set_num_threads).

The MLA step (--mla, on by default): the seed's serving workload scaled down (N requests of 999
prompt tokens, chunked prefill with a token budget, a few layers of DeepSeek-Coder-V2-Lite's
attention with random weights: H=16, kv_lora_rank 512, nope 128, rope 64, v 128, block 16),
every step planned and run on:
  mlakit_step  mlakit.MlaStep (cache write, up-projection, attention with split K, one plan per
               step), on each of mlakit's paths
  torch_path   a PyTorch re-creation of the engine's path: cache write (index_copy), up-projection
               by torch.matmul, K concatenated, flash attention over each request's new tokens
               (causal) and over its context (non-causal, V padded), merged by LSE.
Wall time of the whole schedule, median of --reps passes (paths in turns); outputs compared.

Every figure is the median of --reps timed calls after a warm-up, the callables in turns. PyTorch's
OpenMP threads would spin for milliseconds after each of its calls and take the cores from the
call after it (mlakit's, in turns): OMP_WAIT_POLICY is set to PASSIVE unless the environment sets
it (recorded in the JSON). The machine's 1-minute load is printed before and after. The targets
printed at the end are the issue's: on a CPU with AMX (the amx path), >= 1.3x PyTorch's flash
kernel on every shape and >= 1.5x on the causal ones, the MLA step >= 2x the PyTorch path, and
4 -> 16 threads >= 3.4x; with AVX-512 BF16 alone, >= 2x PyTorch on every shape, the MLA step >= 3x
and 1 -> all threads >= 1.8x on a 2-core machine.

mlakit is imported from PYTHONPATH: an installed package, or a build's extension and the package
sources (PYTHONPATH=BUILD/python:python for a CMake build with -DMLAKIT_BUILD_PYTHON=ON).

    python3 bench/compare_cpu.py                     # everything (about a minute on 2 cores)
    python3 bench/compare_cpu.py --json cpu.json     # also the figures as JSON
    python3 bench/compare_cpu.py --smoke             # seconds: small shapes, one rep
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import platform
import statistics
import sys
import time

# Before torch loads its OpenMP runtime (see the docstring).
OMP_WAIT_POLICY_SET_HERE = "OMP_WAIT_POLICY" not in os.environ
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import seed_schedule as S  # noqa: E402

import torch  # noqa: E402

import mlakit  # noqa: E402

H, DQK, DVO = 16, 192, 128
SHAPES = [  # name, q lengths, kv lengths, causal
    ("1x2048 causal", [2048], [2048], True),
    ("1x1024 non-causal", [1024], [1024], False),
    ("512 q vs 2048 kv non-causal", [512], [2048], False),
    ("8x256 causal", [256] * 8, [256] * 8, True),
    ("4x999 causal", [999] * 4, [999] * 4, True),
]
LONG = SHAPES[:3]
SMOKE_SHAPES = [("1x200 causal", [200], [200], True), ("2x65 non-causal", [65] * 2, [65] * 2, False)]
# The targets (ratios against PyTorch's flash kernel, the PyTorch path, and thread scaling).
AMX_TARGETS = {"attention": 1.3, "attention_causal": 1.5, "mla": 2.0, "scaling": 3.4, "scaling_from": 4,
               "scaling_to": 16}
AVX_TARGETS = {"attention": 2.0, "mla": 3.0, "scaling": 1.8, "scaling_from": 1}  # vs the faster PyTorch kernel


def log(msg=""):
    print(msg, flush=True)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return platform.processor() or "unknown", []
    name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "unknown")
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
    return name, [f for f in ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f") if f in flags]


def smt_siblings():
    """Hardware threads per core as the OS reports them (1 without SMT), or None."""
    try:
        with open("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list") as f:
            text = f.read().strip()
    except OSError:
        return None
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def load1():
    return os.getloadavg()[0]


def set_threads(n):
    torch.set_num_threads(n)
    os.environ["MLAKIT_CPU_THREADS"] = str(n)


def set_path(path):
    os.environ["MLAKIT_CPU_ISA"] = path


def mlakit_paths(info, wanted):
    """mlakit's bf16 paths to time, best first: amx and avx512bf16 beside it where amx is the best."""
    if wanted:
        return wanted
    best = info["cpu_isa_best"]
    return ["amx", "avx512bf16"] if best == "amx" else [best]


def time_in_turns(fns, reps):
    """Median seconds of each callable; one warm-up each, then the timed calls in turns."""
    for fn in fns:
        fn()
    samples = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            samples[i].append(time.perf_counter() - t)
    return [statistics.median(s) for s in samples]


def visible_pairs(lq, lk, causal):
    if not causal:
        return lq * lk
    # bottom-right aligned: query i sees keys j <= lk - lq + i
    return sum(max(0, min(lk, lk - lq + i + 1)) for i in range(lq))


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def matmul_ceiling(reps, n=2048):
    a = torch.randn(n, n, dtype=torch.bfloat16)
    b = torch.randn(n, n, dtype=torch.bfloat16)
    (t,) = time_in_turns([lambda: torch.matmul(a, b)], reps)
    return 2 * n ** 3 / t / 1e9


class AttnCase:
    def __init__(self, name, q_lens, kv_lens, causal, gen):
        self.name, self.q_lens, self.kv_lens, self.causal = name, q_lens, kv_lens, causal
        tq, tk = sum(q_lens), sum(kv_lens)
        self.q = torch.randn(tq, H, DQK, generator=gen).to(torch.bfloat16)
        self.k = torch.randn(tk, H, DQK, generator=gen).to(torch.bfloat16)
        self.v = torch.randn(tk, H, DVO, generator=gen).to(torch.bfloat16)
        self.out = torch.empty(tq, H, DVO, dtype=torch.bfloat16)
        qi = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32)
        ki = torch.tensor([0, *itertools.accumulate(kv_lens)], dtype=torch.int32)
        self.attn = mlakit.RaggedPrefill(H, H, DQK, DVO, dtype="bf16", device="cpu", max_batch=len(q_lens),
                                         max_q_tokens=tq, max_kv_tokens=tk)
        self.attn.plan(qi, ki, causal=causal)
        b, lq, lk = len(q_lens), q_lens[0], kv_lens[0]
        self.tq = self.q.view(b, lq, H, DQK).transpose(1, 2).contiguous()
        self.tk = self.k.view(b, lk, H, DQK).transpose(1, 2).contiguous()
        self.tv = self.v.view(b, lk, H, DVO).transpose(1, 2).contiguous()
        self.tv_pad = torch.nn.functional.pad(self.tv, (0, DQK - DVO))
        self.flops = 2 * (DQK + DVO) * H * sum(visible_pairs(a, c, causal) for a, c in zip(q_lens, kv_lens))

    def mlakit(self, path):
        def call():
            set_path(path)
            self.attn.run(self.q, self.k, self.v, out=self.out)
            return self.out
        return call

    def torch_sdpa(self):
        return torch.nn.functional.scaled_dot_product_attention(self.tq, self.tk, self.tv, is_causal=self.causal)

    def torch_flash(self):
        o, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            self.tq, self.tk, self.tv_pad, 0.0, self.causal, scale=DQK ** -0.5)
        return o[..., :DVO]

    def check(self, paths):
        want = self.torch_flash().transpose(1, 2).reshape(-1, H, DVO)
        err = {f"mlakit_{p}_vs_torch_flash": rel(self.mlakit(p)().clone(), want) for p in paths}
        err["mlakit_vs_torch_flash"] = err[f"mlakit_{paths[0]}_vs_torch_flash"]
        err["torch_sdpa_vs_torch_flash"] = rel(self.torch_sdpa().transpose(1, 2).reshape(-1, H, DVO), want)
        return err


def attention(shapes, reps, threads, ceiling, paths, gen):
    rows = []
    names = [f"mlakit_{p}" for p in paths] + ["torch_sdpa", "torch_flash"]
    log(f"\nattention, bf16, H={H}, (Dqk, Dvo)=({DQK}, {DVO}), {threads} thread(s); GFLOP/s (% of the bf16 "
        f"matmul ceiling {ceiling:.0f}), median of {reps}")
    log(f"{'shape':30s} " + " ".join(f"{n:>18s}" for n in names) + f" {paths[0] + '/flash':>14s}  rel.err")
    for name, ql, kl, causal in shapes:
        c = AttnCase(name, ql, kl, causal, gen)
        err = c.check(paths)
        times = time_in_turns([c.mlakit(p) for p in paths] + [c.torch_sdpa, c.torch_flash], reps)
        g = {n: c.flops / t / 1e9 for n, t in zip(names, times)}
        g["mlakit"] = g[f"mlakit_{paths[0]}"]
        best = max(g["torch_sdpa"], g["torch_flash"])
        row = {"shape": name, "q_lens": ql, "kv_lens": kl, "causal": causal, "threads": threads, "flops": c.flops,
               "path": paths[0], "ms": {n: c.flops / g[n] / 1e6 for n in names}, "gflops": g,
               "pct_ceiling": {k: 100 * v / ceiling for k, v in g.items()},
               "ratio_vs_torch_flash": g["mlakit"] / g["torch_flash"], "ratio_vs_best_torch": g["mlakit"] / best,
               "rel_err": err}
        rows.append(row)
        cell = lambda k: f"{g[k]:7.1f} ({100 * g[k] / ceiling:3.0f}%)"  # noqa: E731
        log(f"{name:30s} " + " ".join(f"{cell(n):>18s}" for n in names) +
            f" {row['ratio_vs_torch_flash']:13.2f}x  {err['mlakit_vs_torch_flash']:.1e}")
    return rows


def thread_counts(spec, cores):
    out = []
    for t in spec.split(","):
        n = cores if t.strip() == "all" else int(t)
        if 1 <= n <= cores and n not in out:
            out.append(n)
    return out


def scaling(shapes, reps, counts, paths, gen):
    """Every mlakit path and PyTorch's flash kernel at each thread count, all calls in turns (a
    load that comes and goes hits every figure alike)."""
    log(f"\nthreads: {', '.join(map(str, counts))} (GFLOP/s; calls in turns)")
    names = [f"mlakit_{p}" for p in paths] + ["torch_flash"]
    rows = []

    def on(n, fn):
        def call():
            set_threads(n)
            fn()
        return call

    for name, ql, kl, causal in shapes:
        c = AttnCase(name, ql, kl, causal, gen)
        fns = [on(n, f) for n in counts for f in [c.mlakit(p) for p in paths] + [c.torch_flash]]
        times = iter(time_in_turns(fns, reps))
        set_threads(counts[0])
        g = {str(n): {k: c.flops / next(times) / 1e9 for k in names} for n in counts}
        row = {"shape": name, "causal": causal, "path": paths[0], "gflops": g,
               "mlakit_gflops": {n: v[f"mlakit_{paths[0]}"] for n, v in g.items()},
               "torch_flash_gflops": {n: v["torch_flash"] for n, v in g.items()}}
        lo, hi = str(counts[-1]), str(counts[0])
        row["mlakit_speedup"] = row["mlakit_gflops"][hi] / row["mlakit_gflops"][lo]
        row["torch_flash_speedup"] = row["torch_flash_gflops"][hi] / row["torch_flash_gflops"][lo]
        rows.append(row)
        log(f"{name}:")
        for n in counts:
            v = g[str(n)]
            log(f"  {n:3d} threads  " + "  ".join(f"{k} {v[k]:7.1f}" for k in names) +
                f"  {paths[0]}/flash {v[f'mlakit_{paths[0]}'] / v['torch_flash']:.2f}x")
        for a, b in zip(counts[1:], counts[:-1]):
            log(f"  {a} -> {b} threads: " + "  ".join(f"{k} {g[str(b)][k] / g[str(a)][k]:.2f}x" for k in names))
    return rows


# ---------------------------------------------------------------------------------------------
# The MLA step

class MlaBench:
    NOPE, ROPE, V, RANK, BS = 128, 64, 128, 512, 16

    def __init__(self, requests, prompt, budget, layers, gen):
        self.steps = S.build_schedule([prompt] * requests, budget)
        self.tables = S.BlockTables([prompt] * requests, self.BS, seed=0)
        cap = max(s.tokens for s in self.steps)
        max_ctx = max(s.context_tokens for s in self.steps)
        self.layers = []
        for _ in range(layers):
            self.layers.append(dict(
                w=(torch.randn(H * (self.NOPE + self.V), self.RANK, generator=gen) * self.RANK ** -0.5).to(torch.bfloat16),
                cache=torch.zeros(self.tables.num_blocks, self.BS, self.RANK + self.ROPE, dtype=torch.bfloat16),
                q=torch.randn(cap, H, self.NOPE + self.ROPE, generator=gen).to(torch.bfloat16),
                kv_c=torch.randn(cap, self.RANK, generator=gen).to(torch.bfloat16),
                k_pe=torch.randn(cap, self.ROPE, generator=gen).to(torch.bfloat16)))
        self.step = mlakit.MlaStep(H, self.RANK, self.NOPE, self.ROPE, self.V, dtype="bf16", device="cpu",
                                   block_size=self.BS, num_blocks=self.tables.num_blocks,
                                   max_batch=max(s.batch for s in self.steps), max_tokens=cap,
                                   max_context_tokens=max_ctx)
        self.scale = (self.NOPE + self.ROPE) ** -0.5
        self.meta = []
        for st in self.steps:
            bt = [self.tables.tables[c.req] for c in st.chunks]
            cols = max(len(r) for r in bt)
            bt = [r + [-1] * (cols - len(r)) for r in bt]
            slots = torch.tensor([s for c in st.chunks for s in self.tables.slots(c.req, c.ctx, c.new)], dtype=torch.long)
            ctx_slots = [torch.tensor(self.tables.slots(c.req, 0, c.ctx), dtype=torch.long) for c in st.chunks]
            self.meta.append(dict(q_lens=[c.new for c in st.chunks], ctx_lens=[c.ctx for c in st.chunks], bt=bt,
                                  slots=slots, ctx_slots=ctx_slots))
        self.flops = S.schedule_flops(self.steps, layers)

    def reset(self):
        for ly in self.layers:
            ly["cache"].zero_()

    def run_mlakit(self, keep=None):
        self.reset()
        for st, m in zip(self.steps, self.meta):
            self.step.plan(m["q_lens"], m["ctx_lens"], m["bt"])
            t = st.tokens
            for ly in self.layers:
                out = self.step.run(ly["q"][:t], ly["kv_c"][:t], ly["k_pe"][:t], ly["w"], ly["cache"])
        if keep is not None:
            keep.append(out)

    def _flash(self, q, k, v, causal):
        vp = torch.nn.functional.pad(v, (0, q.shape[-1] - v.shape[-1]))
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0), vp.transpose(0, 1).unsqueeze(0),
            0.0, causal, scale=self.scale)
        return o[0, :, :, :v.shape[-1]].transpose(0, 1), lse[0].transpose(0, 1)  # [L, H, V], [L, H]

    def _up(self, w, kv_c, k_pe):
        kv = torch.matmul(kv_c, w.t()).view(-1, H, self.NOPE + self.V)
        k_nope, v = kv.split([self.NOPE, self.V], dim=-1)
        k = torch.cat((k_nope, k_pe.view(-1, 1, self.ROPE).expand(-1, H, -1)), dim=-1)
        return k, v

    @staticmethod
    def _merge(o_a, lse_a, o_b, lse_b):
        m = torch.maximum(lse_a, lse_b)
        m = torch.where(torch.isinf(m), 0.0, m)
        wa, wb = torch.exp(lse_a - m), torch.exp(lse_b - m)
        s = wa + wb
        return ((o_a.float() * (wa / s).unsqueeze(-1) + o_b.float() * (wb / s).unsqueeze(-1))).to(o_a.dtype)

    def run_torch(self, keep=None):
        self.reset()
        for st, m in zip(self.steps, self.meta):
            t = st.tokens
            for ly in self.layers:
                flat = ly["cache"].view(-1, self.RANK + self.ROPE)
                flat[:, :self.RANK].index_copy_(0, m["slots"], ly["kv_c"][:t])
                flat[:, self.RANK:].index_copy_(0, m["slots"], ly["k_pe"][:t])
                k, v = self._up(ly["w"], ly["kv_c"][:t], ly["k_pe"][:t])
                outs, q0 = [], 0
                for c, cs in zip(st.chunks, m["ctx_slots"]):
                    q = ly["q"][q0:q0 + c.new]
                    o, lse = self._flash(q, k[q0:q0 + c.new], v[q0:q0 + c.new], True)
                    if c.ctx > 0:
                        lat = flat.index_select(0, cs)
                        kc, vc = self._up(ly["w"], lat[:, :self.RANK], lat[:, self.RANK:])
                        oc, lc = self._flash(q, kc, vc, False)
                        o = self._merge(o, lse, oc, lc)
                    outs.append(o)
                    q0 += c.new
                out = torch.cat(outs)
        if keep is not None:
            keep.append(out)


def mla(args, paths, gen):
    b = MlaBench(args.mla_requests, args.mla_prompt, args.mla_budget, args.mla_layers, gen)
    log(f"\nMLA step: {args.mla_requests} requests x {args.mla_prompt} tokens, budget {args.mla_budget}, "
        f"{len(b.steps)} steps, {args.mla_layers} layers; whole schedule, median of {args.reps}")
    want = []
    b.run_torch(want)
    err = {}
    for p in paths:
        got = []
        set_path(p)
        b.run_mlakit(got)
        err[p] = rel(got[0], want[0])

    def on(p):
        def call():
            set_path(p)
            b.run_mlakit()
        return call

    times = time_in_turns([on(p) for p in paths] + [b.run_torch], args.reps)
    t_t = times[-1]
    ms = {f"mlakit_step_{p}": t * 1e3 for p, t in zip(paths, times)}
    ms["mlakit_step"] = ms[f"mlakit_step_{paths[0]}"]
    ms["torch_path"] = t_t * 1e3
    row = {"requests": args.mla_requests, "prompt": args.mla_prompt, "budget": args.mla_budget,
           "layers": args.mla_layers, "steps": len(b.steps), "path": paths[0], "ms": ms, "flops": b.flops,
           "ratio": t_t / times[0], "ratios": {p: t_t / t for p, t in zip(paths, times)},
           "rel_err_last_step": max(err.values()), "rel_err": err}
    log("  " + "   ".join(f"mlakit_step[{p}] {t * 1e3:9.1f} ms ({t_t / t:.2f}x)" for p, t in zip(paths, times)) +
        f"   torch_path {t_t * 1e3:9.1f} ms   rel.err {row['rel_err_last_step']:.1e}")
    return row


def targets(res):
    """The issue's targets for the path that ran, each met or missed."""
    out = []
    amx = res["paths"][0] == "amx"

    def add(what, value, target):
        out.append({"target": what, "value": value, "min": target, "met": value is not None and value >= target})

    att = res["attention"]
    if amx:
        t = AMX_TARGETS
        add(f">= {t['attention']}x PyTorch's flash kernel on every shape (amx)",
            min(r["ratio_vs_torch_flash"] for r in att), t["attention"])
        causal = [r["ratio_vs_torch_flash"] for r in att if r["causal"]]
        if causal:
            add(f">= {t['attention_causal']}x PyTorch's flash kernel on the causal shapes (amx)", min(causal),
                t["attention_causal"])
    else:
        t = AVX_TARGETS
        add(f">= {t['attention']}x the faster PyTorch kernel on every shape ({res['paths'][0]})",
            min(r["ratio_vs_best_torch"] for r in att), t["attention"])
    if "mla" in res:
        add(f"MLA step >= {t['mla']}x the PyTorch path ({res['paths'][0]})", res["mla"]["ratio"], t["mla"])
    if "scaling" in res:
        lo = str(t["scaling_from"])
        hi = str(res["threads"])
        rows = res["scaling"]
        if lo in rows[0]["mlakit_gflops"] and hi != lo:
            s = min(r["mlakit_gflops"][hi] / r["mlakit_gflops"][lo] for r in rows)
            what = f">= {t['scaling']}x from {lo} to {hi} threads on the long shapes ({res['paths'][0]})"
            if amx and res["threads"] != t["scaling_to"]:
                what += f" (the target is for {t['scaling_to']} threads)"
            add(what, s, t["scaling"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="threads of the attention table (0: all cores)")
    ap.add_argument("--threads-list", default="all,4,1", help="thread counts of the scaling part, the first the most")
    ap.add_argument("--paths", default="", help="mlakit paths to time, comma-separated (default: amx and "
                    "avx512bf16 where amx is the best path here, else the best path)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--smoke", action="store_true", help="small shapes and workload, one rep")
    ap.add_argument("--no-mla", action="store_true")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--mla-requests", type=int, default=8)
    ap.add_argument("--mla-prompt", type=int, default=999)
    ap.add_argument("--mla-budget", type=int, default=2048)
    ap.add_argument("--mla-layers", type=int, default=2)
    args = ap.parse_args()
    if args.smoke:
        args.reps, args.mla_requests, args.mla_prompt, args.mla_budget, args.mla_layers = 1, 3, 70, 128, 1
    cores = os.cpu_count() or 1
    threads = args.threads or cores
    set_threads(threads)
    model, flags = cpu_model()
    info = mlakit.info()
    paths = mlakit_paths(info, [p for p in args.paths.split(",") if p])
    load_start = load1()
    log(f"{model}  flags: {' '.join(flags)}  cores: {cores}  SMT threads per core: {smt_siblings()}")
    log(f"mlakit {info['version']} from {os.path.dirname(mlakit.__file__)}: CPU path {info['cpu_isa']} "
        f"(best here {info['cpu_isa_best']}, AMX tiles granted: {info['cpu_has_amx']}), products "
        f"{info['cpu_products']}; timed: {', '.join(paths)}")
    log(f"torch {torch.__version__}, Python {platform.python_version()}, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"
        f"{' (set here)' if OMP_WAIT_POLICY_SET_HERE else ''}")
    log(f"1-minute load at start: {load_start:.2f}" +
        ("  (busy machine: figures are noisy)" if load_start >= 0.3 * max(1, cores / 2) else ""))
    gen = torch.Generator().manual_seed(0)
    ceiling = matmul_ceiling(args.reps)
    log(f"bf16 matrix product 2048^3 (torch.matmul): {ceiling:.0f} GFLOP/s, {threads} thread(s)")
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpu": model, "flags": flags, "cores": cores, "smt_threads_per_core": smt_siblings()},
           "mlakit_info": info, "mlakit_file": mlakit.__file__, "paths": paths, "torch": torch.__version__,
           "python": platform.python_version(), "omp_wait_policy": os.environ["OMP_WAIT_POLICY"],
           "reps": args.reps, "threads": threads, "load_start": load_start, "bf16_matmul_ceiling_gflops": ceiling}
    res["attention"] = attention(shapes, args.reps, threads, ceiling, paths, gen)
    counts = thread_counts(args.threads_list.replace("all", str(threads)), cores)
    if not args.no_scaling and len(counts) > 1:
        res["scaling"] = scaling(SMOKE_SHAPES[:1] if args.smoke else LONG, args.reps, counts, paths, gen)
    set_threads(threads)
    if not args.no_mla:
        res["mla"] = mla(args, paths, gen)
    res["load_end"] = load1()
    log(f"\n1-minute load at end: {res['load_end']:.2f}")
    res["targets"] = targets(res)
    if not args.smoke:
        log(f"targets ({'AMX' if paths[0] == 'amx' else 'AVX-512 BF16 without AMX'}):")
        for t in res["targets"]:
            v = "-" if t["value"] is None else f"{t['value']:.2f}x"
            log(f"  {t['target']}: {v}  {'met' if t['met'] else 'NOT met'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
        log(f"wrote {args.json}")
    bad = [r["shape"] for r in res["attention"]
           if not all(v < 2e-2 for k, v in r["rel_err"].items() if k.startswith("mlakit"))]
    if "mla" in res and not res["mla"]["rel_err_last_step"] < 3e-2:
        bad.append("mla")
    if bad:
        log(f"RESULTS DIFFER from PyTorch: {bad}")
        sys.exit(1)


if __name__ == "__main__":
    main()
