#!/usr/bin/env python3
"""mlakit's CPU backend against PyTorch on the CPU, in one process.

Attention: bf16, H=16, (Dqk, Dvo) = (192, 128), the issue's shapes (1x2048 causal, 1x1024
non-causal, 512 q vs 2048 kv non-causal, 8x256 causal, 4x999 causal). mlakit runs them as one
ragged batch (RaggedPrefill, planned once); PyTorch as a dense batch [B, H, L, D] (the ragged
shapes have equal lengths) two ways, and the ratio is taken against the faster:
  torch_sdpa   torch.nn.functional.scaled_dot_product_attention with V of 128 (the call as written)
  torch_flash  PyTorch's CPU flash-attention kernel (aten::_scaled_dot_product_flash_attention_for_cpu),
               which needs V padded to 192 as vLLM's FA2 path pads it; output sliced back to 128.
GFLOP/s count visible (query, key) pairs only: 2 * (192 + 128) * pairs * H. The bf16 matrix-product
ceiling (torch.matmul 2048^3, oneDNN) is measured in the same run; "% ceil" is against it. Thread
scaling (1 thread vs all) on the long shapes: MLAKIT_CPU_THREADS and torch.set_num_threads.

The MLA step (--mla, on by default): the seed's serving workload scaled down (N requests of 999
prompt tokens, chunked prefill with a token budget, a few layers of DeepSeek-Coder-V2-Lite's
attention with random weights: H=16, kv_lora_rank 512, nope 128, rope 64, v 128, block 16),
every step planned and run on:
  mlakit_step  mlakit.MlaStep (cache write, up-projection, attention with split K, one plan per step)
  torch_path   a PyTorch re-creation of the engine's path: cache write (index_copy), up-projection
               by torch.matmul, K concatenated, flash attention over each request's new tokens
               (causal) and over its context (non-causal, V padded), merged by LSE.
Wall time of the whole schedule, median of --reps passes (paths in turns); outputs compared.

Every figure is the median of --reps timed calls after a warm-up. The machine's 1-minute load is
printed before and after (the figures mean little above ~0.3 on a 2-core machine).

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
TARGET_SDPA, TARGET_MLA, TARGET_SCALING = 2.0, 3.0, 1.8  # the targets on a CPU with AVX-512 BF16 and no AMX


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


def load1():
    return os.getloadavg()[0]


def set_threads(n):
    torch.set_num_threads(n)
    os.environ["MLAKIT_CPU_THREADS"] = str(n)


def median_ms(samples):
    return statistics.median(samples) * 1e3


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

    def mlakit(self):
        self.attn.run(self.q, self.k, self.v, out=self.out)
        return self.out

    def torch_sdpa(self):
        return torch.nn.functional.scaled_dot_product_attention(self.tq, self.tk, self.tv, is_causal=self.causal)

    def torch_flash(self):
        o, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            self.tq, self.tk, self.tv_pad, 0.0, self.causal, scale=DQK ** -0.5)
        return o[..., :DVO]

    def check(self):
        want = self.torch_flash().transpose(1, 2).reshape(-1, H, DVO)
        return {"mlakit_vs_torch_flash": rel(self.mlakit(), want),
                "torch_sdpa_vs_torch_flash": rel(self.torch_sdpa().transpose(1, 2).reshape(-1, H, DVO), want)}


def attention(shapes, reps, threads, ceiling, gen):
    rows = []
    log(f"\nattention, bf16, H={H}, (Dqk, Dvo)=({DQK}, {DVO}), {threads} thread(s); GFLOP/s (% of the bf16 "
        f"matmul ceiling {ceiling:.0f}), median of {reps}")
    log(f"{'shape':30s} {'mlakit':>14s} {'torch_sdpa':>14s} {'torch_flash':>14s} {'mlakit/best torch':>18s}  rel.err")
    for name, ql, kl, causal in shapes:
        c = AttnCase(name, ql, kl, causal, gen)
        err = c.check()
        t_m, t_s, t_f = time_in_turns([c.mlakit, c.torch_sdpa, c.torch_flash], reps)
        g = {k: c.flops / t / 1e9 for k, t in (("mlakit", t_m), ("torch_sdpa", t_s), ("torch_flash", t_f))}
        best = max(g["torch_sdpa"], g["torch_flash"])
        row = {"shape": name, "q_lens": ql, "kv_lens": kl, "causal": causal, "threads": threads, "flops": c.flops,
               "ms": {"mlakit": t_m * 1e3, "torch_sdpa": t_s * 1e3, "torch_flash": t_f * 1e3},
               "gflops": g, "pct_ceiling": {k: 100 * v / ceiling for k, v in g.items()},
               "ratio_vs_best_torch": g["mlakit"] / best, "rel_err": err}
        rows.append(row)
        cell = lambda k: f"{g[k]:6.1f} ({100 * g[k] / ceiling:3.0f}%)"  # noqa: E731
        log(f"{name:30s} {cell('mlakit'):>14s} {cell('torch_sdpa'):>14s} {cell('torch_flash'):>14s} "
            f"{row['ratio_vs_best_torch']:17.2f}x  {err['mlakit_vs_torch_flash']:.1e}")
    return rows


def scaling(shapes, reps, nthreads, gen):
    """1 thread against all, the four calls in turns (a load that comes and goes hits both)."""
    log(f"\nthread scaling, 1 -> {nthreads} threads (GFLOP/s; calls in turns)")
    rows = []

    def on(n, fn):
        def call():
            set_threads(n)
            fn()
        return call

    for name, ql, kl, causal in shapes:
        c = AttnCase(name, ql, kl, causal, gen)
        t = time_in_turns([on(1, c.mlakit), on(nthreads, c.mlakit), on(1, c.torch_flash), on(nthreads, c.torch_flash)], reps)
        set_threads(nthreads)
        m1, mn, f1, fn = (c.flops / x / 1e9 for x in t)
        row = {"shape": name, "mlakit_gflops": {"1": m1, str(nthreads): mn},
               "torch_flash_gflops": {"1": f1, str(nthreads): fn},
               "mlakit_speedup": mn / m1, "torch_flash_speedup": fn / f1}
        rows.append(row)
        log(f"{name:30s} mlakit {m1:6.1f} -> {mn:6.1f} ({row['mlakit_speedup']:.2f}x)   "
            f"torch_flash {f1:6.1f} -> {fn:6.1f} ({row['torch_flash_speedup']:.2f}x)")
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


def mla(args, gen):
    b = MlaBench(args.mla_requests, args.mla_prompt, args.mla_budget, args.mla_layers, gen)
    log(f"\nMLA step: {args.mla_requests} requests x {args.mla_prompt} tokens, budget {args.mla_budget}, "
        f"{len(b.steps)} steps, {args.mla_layers} layers; whole schedule, median of {args.reps}")
    got, want = [], []
    b.run_mlakit(got)
    b.run_torch(want)
    err = rel(got[0], want[0])
    t_m, t_t = time_in_turns([b.run_mlakit, b.run_torch], args.reps)
    fl = b.flops
    row = {"requests": args.mla_requests, "prompt": args.mla_prompt, "budget": args.mla_budget,
           "layers": args.mla_layers, "steps": len(b.steps), "ms": {"mlakit_step": t_m * 1e3, "torch_path": t_t * 1e3},
           "flops": fl, "ratio": t_t / t_m, "rel_err_last_step": err}
    log(f"  mlakit_step {t_m * 1e3:9.1f} ms   torch_path {t_t * 1e3:9.1f} ms   torch/mlakit {t_t / t_m:.2f}x   "
        f"rel.err {err:.1e}")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="threads (0: all cores)")
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
    threads = args.threads or os.cpu_count() or 1
    set_threads(threads)
    model, flags = cpu_model()
    info = mlakit.info()
    load_start = load1()
    log(f"{model}  flags: {' '.join(flags)}  cores: {os.cpu_count()}")
    log(f"mlakit {info['version']}: CPU path {info['cpu_isa']} (best here {info['cpu_isa_best']}), "
        f"products {info['cpu_products']}; torch {torch.__version__}")
    log(f"1-minute load at start: {load_start:.2f}" + ("  (busy machine: figures are noisy)" if load_start >= 0.3 else ""))
    gen = torch.Generator().manual_seed(0)
    ceiling = matmul_ceiling(args.reps)
    log(f"bf16 matrix product 2048^3 (torch.matmul): {ceiling:.0f} GFLOP/s, {threads} thread(s)")
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpu": model, "flags": flags, "cores": os.cpu_count()}, "mlakit_info": info,
           "torch": torch.__version__, "reps": args.reps, "threads": threads, "load_start": load_start,
           "bf16_matmul_ceiling_gflops": ceiling}
    res["attention"] = attention(shapes, args.reps, threads, ceiling, gen)
    if not args.no_scaling and threads > 1:
        res["scaling"] = scaling(SMOKE_SHAPES[:1] if args.smoke else LONG, args.reps, threads, gen)
    if not args.no_mla:
        res["mla"] = mla(args, gen)
    res["load_end"] = load1()
    log(f"\n1-minute load at end: {res['load_end']:.2f}")
    if not args.smoke:
        log("targets (AVX-512 BF16 without AMX):")
        worst = min(r["ratio_vs_best_torch"] for r in res["attention"])
        log(f"  >= {TARGET_SDPA}x PyTorch on every shape: lowest {worst:.2f}x  {'met' if worst >= TARGET_SDPA else 'NOT met'}")
        if "mla" in res:
            r = res["mla"]["ratio"]
            log(f"  MLA step >= {TARGET_MLA}x the PyTorch path: {r:.2f}x  {'met' if r >= TARGET_MLA else 'NOT met'}")
        if "scaling" in res:
            s = min(r["mlakit_speedup"] for r in res["scaling"])
            log(f"  >= {TARGET_SCALING}x from 1 to {threads} threads on the long shapes: lowest {s:.2f}x  "
                f"{'met' if s >= TARGET_SCALING else 'NOT met'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
        log(f"wrote {args.json}")
    bad = [r["shape"] for r in res["attention"] if not r["rel_err"]["mlakit_vs_torch_flash"] < 2e-2]
    if "mla" in res and not res["mla"]["rel_err_last_step"] < 3e-2:
        bad.append("mla")
    if bad:
        log(f"RESULTS DIFFER from PyTorch: {bad}")
        sys.exit(1)


if __name__ == "__main__":
    main()
