#!/usr/bin/env python3
"""DeepSeek-V3.2's prefill through mlakit.MlaStep: the sparse step (plan(topk=2048): tokens past
top-k attend to the 2048 positions the indexer picked, in latent space; the rest densely) beside
the dense step on the same tokens (every token over its whole causal context: what the step
does without an indexer, and what SGLang compares its sparse prefill against). One layer,
graph-replayed, side by side in one process (bench/mla_absorb_crossover.py's timing).

Workloads, per head count: one prompt of P tokens prefilled in one step (context 0), and a
2048-token chunk of a longer prompt over C cached tokens. The indices are random distinct causal
positions (the kernel's work does not depend on which). The issue's target: at 2k-16k tokens of
context the sparse step is at least as fast as the dense one (ratio dense / sparse >= 1).

On DeepSeek-V3.2's FP8 cache (--kv-cache-dtype fp8_ds_mla: the random bf16 cache quantized as
FlashMLA quantizes it, latent_workloads.ds_mla_quantize) both steps read 656-byte rows;
--max-decoded-rows gives the sparse step's latent attention its decode workspace
(MlaConfig::max_decoded_rows; 0: rows decoded in the kernel).

    python3 bench/mla_sparse_step.py                     # about a minute on an H100
    python3 bench/mla_sparse_step.py --heads 128 --prompts 4096,8192 --chunks 8192 --json sparse.json
    python3 bench/mla_sparse_step.py --heads 128 --kv-cache-dtype fp8_ds_mla --max-decoded-rows 65536
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mla_absorb_crossover as X  # noqa: E402  (graph capture and timing in turns)
from latent_workloads import ds_mla_quantize  # noqa: E402  (FlashMLA's fp8_ds_mla quantizer)

import mlakit  # noqa: E402

L, R, DN, DV, BS, TOPK = 512, 64, 128, 128, 64, 2048


def indices_for(ctx, q, gen, dev):
    """[q, TOPK] int32: per new token at position p, min(p + 1, TOPK) distinct positions <= p, -1 after."""
    idx = torch.full((q, TOPK), -1, dtype=torch.int32)
    for i in range(q):
        p = ctx + i
        n = min(p + 1, TOPK)
        idx[i, :n] = torch.randperm(p + 1, generator=gen)[:n].to(torch.int32)
    return idx.to(dev)


class Step:
    """One request of q new tokens over ctx cached ones, its layer tensors, and both steps."""

    def __init__(self, heads, ctx, q, gen, dev, kv_cache_dtype="auto", max_decoded_rows=0):
        self.q, self.ctx = q, ctx
        pages = -(-(ctx + q) // BS)
        g = dict(generator=gen)
        self.block_table = torch.randperm(pages, generator=gen).view(1, pages).to(torch.int32)
        self.q_t = torch.randn(q, heads, DN + R, **g).to(dev, torch.bfloat16)
        self.kv_c = torch.randn(q, L, **g).to(dev, torch.bfloat16)
        self.k_pe = torch.randn(q, R, **g).to(dev, torch.bfloat16)
        self.w = (torch.randn(heads * (DN + DV), L, **g) / math.sqrt(L)).to(dev, torch.bfloat16)
        self.cache = torch.randn(pages, BS, L + R, **g).to(dev, torch.bfloat16)
        if kv_cache_dtype == "fp8_ds_mla":
            self.cache = ds_mla_quantize(torch, self.cache)
        self.out = torch.empty(q, heads, DV, device=dev, dtype=torch.bfloat16)
        self.indices = indices_for(ctx, q, gen, dev)
        kw = dict(dtype=torch.bfloat16, device=dev.type, block_size=BS, num_blocks=pages, max_batch=1,
                  max_tokens=q, max_context_tokens=ctx, kv_cache_dtype=kv_cache_dtype)
        self.dense = mlakit.MlaStep(heads, absorb_max_query_len=0, **kw)
        self.dense.plan([q], [ctx], self.block_table)
        self.sparse = mlakit.MlaStep(heads, max_topk=TOPK, max_absorbed_tokens=q, max_decoded_rows=max_decoded_rows,
                                     **kw)
        self.sparse.plan([q], [ctx], self.block_table, topk=TOPK)
        self.dev = dev

    def run(self, s):
        s.run(self.q_t, self.kv_c, self.k_pe, self.w, self.cache, out=self.out,
              indices=self.indices if s is self.sparse else None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", default="128,16")
    ap.add_argument("--prompts", default="2048,4096,8192,16384", help="one-step prompts (context 0)")
    ap.add_argument("--chunks", default="4096,8192,14336", help="contexts of a 2048-token chunk")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8_ds_mla"])
    ap.add_argument("--max-decoded-rows", type=int, default=0,
                    help="the sparse step's decode workspace on an FP8 cache (MlaConfig::max_decoded_rows)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("mla_sparse_step.py: needs a CUDA device", flush=True)
        return 1
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    commit = os.environ.get("MLAKIT_GIT_COMMIT", "")
    print(f"{torch.cuda.get_device_name(0)}; mlakit at {commit}; top-k {TOPK}, page {BS}, bf16, cache "
          f"{args.kv_cache_dtype} (decode workspace {args.max_decoded_rows} rows); one layer, graph-replayed; "
          "ms per layer (dense step / sparse step)", flush=True)
    rows = []
    work = [("prompt", 0, int(p)) for p in args.prompts.split(",") if p] + \
           [("chunk", int(c), 2048) for c in args.chunks.split(",") if c]
    for h in [int(x) for x in args.heads.split(",")]:
        print(f"\n== heads {h}", flush=True)
        for kind, ctx, q in work:
            st = Step(h, ctx, q, gen, dev, args.kv_cache_dtype, args.max_decoded_rows)
            graphs = [X.graph_of(st, st.dense), X.graph_of(st, st.sparse)]
            t_dense, t_sparse = X.time_graphs(graphs, args.reps, args.rounds, True)
            r = {"heads": h, "kind": kind, "ctx": ctx, "q": q, "dense_ms": t_dense, "sparse_ms": t_sparse,
                 "sparse_tokens": st.sparse.info.sparse_tokens, "dense_over_sparse": t_dense / t_sparse}
            rows.append(r)
            print(f"  {kind:6s} ctx {ctx:5d} + {q:5d} new: {t_dense:8.3f} / {t_sparse:8.3f}  "
                  f"sparse x{t_dense / t_sparse:.2f} ({r['sparse_tokens']} sparse tokens)", flush=True)
            del graphs, st
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "commit": commit, "topk": TOPK,
                       "kv_cache_dtype": args.kv_cache_dtype, "max_decoded_rows": args.max_decoded_rows,
                       "date": datetime.date.today().isoformat(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
