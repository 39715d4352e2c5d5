#!/usr/bin/env python3
"""mlakit.LatentAttention on the CPU against PyTorch paths on the same cores, in one process.

Latent-space (absorbed) MLA attention as a DeepSeek engine runs it: every head reads the same
cached latent rows (576 = 512 + 64 wide, V = their first 512 columns), paged at 64 tokens a block
through a shuffled block table; bf16, H=16 (DeepSeek-V2-Lite's, or V3's 128 heads over TP8).
Workloads:
  decode        B requests x 1 new token over 4096 cached tokens (the issue's target: >= 1.5x)
  mtp2          B x 2 new tokens (speculative verification), causal among them
  sparse        B x 1 token attending to 2048 of 4096 positions (DSA; request-local positions)
  decode_fp8, sparse_fp8   decode and sparse on DeepSeek-V3.2's fp8_ds_mla cache (the same rows
                quantized as FlashMLA's quantizer writes them; the PyTorch paths read the bf16 rows
                they decode to)
PyTorch, two ways on the same threads, the ratio taken against the faster:
  torch_matmul  the latent rows gathered through the block table (index_select), scores by
                torch.matmul, softmax in float32, P V by torch.matmul (sparse: the indexed rows)
  torch_sdpa    the same gather, then scaled_dot_product_attention with the heads (x new
                tokens) as the query rows of one KV head (enable_gqa would copy K per head) and
                V = K's first 512 columns
Both include the gather, which the engine's PyTorch path cannot avoid (the cache is paged);
mlakit reads the pages in place. For scale, torch_matmul is also timed on rows gathered once
beforehand (the products and softmax alone; not a path an engine has). GFLOP/s count 2 * (576 + 512) * H per (query, key) pair
attended; the bf16 matrix-product ceiling (torch.matmul 2048^3) is measured in the same run and
every figure is also given as its percentage. Median of --reps calls, the paths in turns.

    python3 bench/compare_cpu_latent.py                  # about half a minute on 2 cores
    python3 bench/compare_cpu_latent.py --json cpu_latent.json
    python3 bench/compare_cpu_latent.py --smoke          # seconds: small shapes, one rep
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_cpu as C  # noqa: E402  (log, timing in turns, the ceiling, the machine)
import latent_workloads as LW  # noqa: E402  (the fp8_ds_mla quantizer)

import torch  # noqa: E402

import mlakit  # noqa: E402

L, R, BS = 512, 64, 64
TARGET_DECODE = 1.5  # the CPU target: dense decode >= 1.5x the PyTorch path


class Case:
    """One workload: the cache, block table, q and (sparse) indices, and the object planned for it."""

    def __init__(self, name, batch, q_len, ctx, heads, topk, gen, fp8=False):
        self.name, self.batch, self.q_len, self.ctx, self.heads, self.topk = name, batch, q_len, ctx, heads, topk
        pages = (ctx + BS - 1) // BS
        self.num_blocks = batch * pages
        self.cache = torch.randn(self.num_blocks, BS, L + R, generator=gen).to(torch.bfloat16)
        self.cache_run = self.cache  # what mlakit reads
        if fp8:  # mlakit reads the fp8_ds_mla rows, PyTorch the bf16 rows they decode to
            self.cache_run = LW.ds_mla_quantize(torch, self.cache)
            self.cache = LW.ds_mla_decode(torch, self.cache_run)
        self.table = torch.randperm(self.num_blocks, generator=gen).view(batch, pages).to(torch.int32)
        T = batch * q_len
        self.q = torch.randn(T, heads, L + R, generator=gen).to(torch.bfloat16)
        self.out = torch.empty(T, heads, L, dtype=torch.bfloat16)
        self.scale = 192 ** -0.5  # DeepSeek's qk_head_dim^-0.5 (no YaRN factor: random data)
        self.indices = None
        self._kv = None
        if topk:
            # topk distinct positions of each request, sorted (as an indexer's top-k, unordered
            # would do the same work).
            self.indices = torch.stack([torch.randperm(ctx, generator=gen)[:topk].sort().values
                                        for _ in range(T)]).to(torch.int32)
        self.attn = mlakit.LatentAttention(heads, dtype=torch.bfloat16, block_size=BS, num_blocks=self.num_blocks,
                                           max_batch=batch, max_q_tokens=T, max_kv_tokens=batch * ctx,
                                           max_topk=topk, kv_cache_dtype="fp8_ds_mla" if fp8 else "auto")
        self.attn.plan([q_len] * batch, [ctx] * batch, self.table, sm_scale=self.scale, topk=topk)
        keys = topk if topk else ctx
        pairs = (batch * q_len * keys if topk or q_len == 1 else
                 batch * sum(ctx - q_len + i + 1 for i in range(q_len)))
        self.flops = 2 * (L + R + L) * heads * pairs
        # Causal mask of the new tokens among themselves (bottom-right), for the PyTorch paths.
        self.mask = None
        if not topk and q_len > 1:
            pos = torch.arange(ctx)
            self.mask = pos.view(1, ctx) <= (ctx - q_len + torch.arange(q_len)).view(q_len, 1)  # [q, ctx]

    def mlakit(self):
        self.attn.run(self.q, self.cache_run, indices=self.indices, out=self.out)
        return self.out

    def _gather(self):
        """The rows each query attends, [B, q_len or 1, keys, 576] through the block table."""
        flat = self.cache.view(-1, L + R)
        if self.indices is None:
            slots = (self.table.long().view(self.batch, -1, 1) * BS + torch.arange(BS)).view(self.batch, -1)
            kv = flat.index_select(0, slots[:, :self.ctx].reshape(-1)).view(self.batch, 1, self.ctx, L + R)
            return kv
        idx = self.indices.long().view(self.batch, self.q_len, self.topk)
        slots = self.table.long().gather(1, (idx // BS).view(self.batch, -1)).view_as(idx) * BS + idx % BS
        return flat.index_select(0, slots.reshape(-1)).view(self.batch, self.q_len, self.topk, L + R)

    def torch_matmul(self):
        return self._matmul(self._gather())

    def torch_matmul_pregathered(self):
        # Not a path an engine has (its cache is paged): what the products and softmax cost alone.
        if self._kv is None:
            self._kv = self._gather()
        return self._matmul(self._kv)

    def _matmul(self, kv):                                                # kv [B, 1 | q, keys, 576]
        q = self.q.view(self.batch, self.q_len, self.heads, L + R)
        if kv.shape[1] == 1:                                              # all new tokens x heads as rows
            s = torch.matmul(q.reshape(self.batch, 1, self.q_len * self.heads, L + R), kv.transpose(-1, -2))
            s = s.view(self.batch, self.q_len, self.heads, -1)
        else:
            s = torch.matmul(q, kv.transpose(-1, -2))                     # [B, q, H, keys]
        s = s.float() * self.scale
        if self.mask is not None:
            s = s.masked_fill(~self.mask.view(1, self.q_len, 1, -1), -math.inf)
        p = torch.softmax(s, dim=-1).to(torch.bfloat16)
        if kv.shape[1] == 1:
            o = torch.matmul(p.view(self.batch, 1, self.q_len * self.heads, -1), kv[..., :L])
        else:
            o = torch.matmul(p, kv[..., :L])
        return o.view(-1, self.heads, L)

    def torch_sdpa(self):
        # One KV head: the heads (and new tokens) become the query rows of a single-head problem,
        # so SDPA reads each gathered row once instead of repeating it per head (enable_gqa).
        kv = self._gather()                                               # [B, 1 | q, keys, 576]
        if kv.shape[1] == 1:
            q = self.q.view(self.batch, 1, self.q_len * self.heads, L + R)
            mask = None
            if self.mask is not None:
                mask = self.mask.repeat_interleave(self.heads, dim=0).view(1, 1, self.q_len * self.heads, -1)
            o = torch.nn.functional.scaled_dot_product_attention(q, kv, kv[..., :L], attn_mask=mask, scale=self.scale)
            return o.view(-1, self.heads, L)
        # Sparse: every token its own keys, as a batch of B * q single-head problems.
        q = self.q.view(-1, 1, self.heads, L + R)
        k = kv.view(-1, 1, self.topk, L + R)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, k[..., :L], scale=self.scale)
        return o.view(-1, self.heads, L)


def run_case(c, reps, ceiling):
    want = c.torch_matmul()
    errs = {"mlakit_vs_torch_matmul": C.rel(c.mlakit(), want),
            "torch_sdpa_vs_torch_matmul": C.rel(c.torch_sdpa(), want)}
    c.torch_matmul_pregathered()
    t_m, t_t, t_s, t_p = C.time_in_turns([c.mlakit, c.torch_matmul, c.torch_sdpa, c.torch_matmul_pregathered], reps)
    c._kv = None
    g = {k: c.flops / t / 1e9 for k, t in (("mlakit", t_m), ("torch_matmul", t_t), ("torch_sdpa", t_s),
                                            ("torch_matmul_pregathered", t_p))}
    best = max(g["torch_matmul"], g["torch_sdpa"])
    row = {"workload": c.name, "batch": c.batch, "q_len": c.q_len, "ctx": c.ctx, "heads": c.heads, "topk": c.topk,
           "block_size": BS, "flops": c.flops,
           "ms": {"mlakit": t_m * 1e3, "torch_matmul": t_t * 1e3, "torch_sdpa": t_s * 1e3,
                  "torch_matmul_pregathered": t_p * 1e3},
           "gflops": g, "pct_ceiling": {k: 100 * v / ceiling for k, v in g.items()},
           "ratio_vs_best_torch": g["mlakit"] / best,
           "ratio_vs_pregathered": g["mlakit"] / g["torch_matmul_pregathered"], "rel_err": errs,
           "plan": {"num_items": c.attn.info.num_items, "num_merges": c.attn.info.num_merges,
                    "cpu_isa": c.attn.info.cpu_isa}}
    cell = lambda k: f"{t_m * 1e3 if k == 'mlakit' else row['ms'][k]:7.1f} ms {g[k]:6.1f} ({100 * g[k] / ceiling:3.0f}%)"  # noqa: E731
    C.log(f"{c.name:38s} {cell('mlakit'):>24s} {cell('torch_matmul'):>24s} {cell('torch_sdpa'):>24s} "
          f"{row['ratio_vs_best_torch']:8.2f}x  {errs['mlakit_vs_torch_matmul']:.1e}   "
          f"{cell('torch_matmul_pregathered'):>24s} {row['ratio_vs_pregathered']:6.2f}x")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="threads (0: all cores)")
    ap.add_argument("--batch", type=int, default=32, help="requests per workload")
    ap.add_argument("--ctx", type=int, default=4096, help="cached tokens per request")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--topk", type=int, default=2048, help="the sparse workload's keys per token")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--smoke", action="store_true", help="small shapes, one rep")
    args = ap.parse_args()
    if args.smoke:
        args.reps, args.batch, args.ctx, args.topk = 1, 3, 300, 128
    threads = args.threads or os.cpu_count() or 1
    C.set_threads(threads)
    model, flags = C.cpu_model()
    info = mlakit.info()
    load_start = C.load1()
    C.log(f"{model}  flags: {' '.join(flags)}  cores: {os.cpu_count()}")
    C.log(f"mlakit {info['version']}: CPU path {info['cpu_isa']}; torch {torch.__version__}, {threads} thread(s)")
    C.log(f"1-minute load at start: {load_start:.2f}" + ("  (busy machine: figures are noisy)" if load_start >= 0.3 else ""))
    gen = torch.Generator().manual_seed(0)
    ceiling = C.matmul_ceiling(args.reps)
    C.log(f"bf16 matrix product 2048^3 (torch.matmul): {ceiling:.0f} GFLOP/s")
    b, ctx, h = args.batch, args.ctx, args.heads
    workloads = [(f"decode {b} x 1 over {ctx}, H={h}", b, 1, ctx, h, 0),
                 (f"mtp2 {b} x 2 over {ctx}, H={h}", b, 2, ctx, h, 0),
                 (f"sparse {b} x 1, top-{args.topk} of {ctx}, H={h}", b, 1, ctx, h, args.topk),
                 (f"decode_fp8 {b} x 1 over {ctx}, H={h}", b, 1, ctx, h, 0, True),
                 (f"sparse_fp8 {b} x 1, top-{args.topk} of {ctx}, H={h}", b, 1, ctx, h, args.topk, True)]
    C.log(f"\nlatent attention, bf16, page {BS}; time, GFLOP/s (% of the ceiling), median of {args.reps}")
    C.log(f"{'workload':38s} {'mlakit':>24s} {'torch_matmul':>24s} {'torch_sdpa':>24s} {'vs best':>9s}  rel.err   "
          f"{'(matmul, rows pre-gathered)':>24s} {'vs it':>7s}")
    rows = [run_case(Case(name, *shape[:5], gen, *shape[5:]), args.reps, ceiling) for name, *shape in workloads]
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpu": model, "flags": flags, "cores": os.cpu_count()}, "mlakit_info": info,
           "torch": torch.__version__, "reps": args.reps, "threads": threads, "load_start": load_start,
           "bf16_matmul_ceiling_gflops": ceiling, "latent": rows, "load_end": C.load1()}
    C.log(f"\n1-minute load at end: {res['load_end']:.2f}")
    if not args.smoke:
        r = rows[0]["ratio_vs_best_torch"]
        C.log(f"target: dense decode >= {TARGET_DECODE}x the faster PyTorch path: {r:.2f}x  "
              f"{'met' if r >= TARGET_DECODE else 'NOT met'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
        C.log(f"wrote {args.json}")
    bad = [r["workload"] for r in rows if not (r["rel_err"]["mlakit_vs_torch_matmul"] < 2e-2
                                               and r["rel_err"]["torch_sdpa_vs_torch_matmul"] < 2e-2)]
    if bad:
        C.log(f"RESULTS DIFFER: {bad}")
        sys.exit(1)


if __name__ == "__main__":
    main()
