"""A vLLM-style DeepSeek MLA prefill forward written against mlakit.torch.

MLA keeps a compressed *latent* KV cache per token: ``kv_c`` (kv_lora_rank values) and the
decoupled rotary key ``k_pe`` (rope dim values, shared by all heads). Prefill expands the latent
with ``kv_b_proj`` into per-head ``k_nope`` and ``v``, appends ``k_pe`` to every head's key, and
runs ordinary (MHA) attention with (Dqk, Dvo) = (nope + rope, v_head_dim) = (192, 128):

* the new tokens of each request attend to themselves **causally** (one ragged prefill), and
* to the request's cached context **non-causally**, in chunks of at most ``chunk_tokens`` context
  tokens per request (so the expanded K/V of a long context never has to exist at once);
* the partial results are combined by their log-sum-exp with ``merge_states``.

As in vLLM, all metadata (the plans) is built before the forward, which then only calls ops, so
the forward works under ``torch.compile``.

Run:  python examples/mla_prefill_vllm_style.py [--device cuda] [--heads 16]
It checks the result against naive attention over the fully expanded cache and prints the error.
"""

import argparse
import math
from dataclasses import dataclass
from typing import List

import torch

import mlakit
import mlakit.torch as mt


@dataclass
class MLADims:
    num_heads: int = 16
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


def indptr(lengths: List[int]) -> torch.Tensor:
    t = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    t[1:] = torch.tensor(lengths, dtype=torch.int32).cumsum(0)
    return t


class MLAPrefillMetadata:
    """What vLLM's metadata builder computes once per step: plans for the new-token attention
    and for each context chunk, plus the latent-cache rows each chunk gathers."""

    def __init__(self, dims: MLADims, context_lens: List[int], query_lens: List[int],
                 chunk_tokens: int, dtype: torch.dtype, device: torch.device):
        self.query_lens, self.context_lens = query_lens, context_lens
        common = dict(dtype=dtype, device=device)
        heads, dqk, dvo = dims.num_heads, dims.qk_head_dim, dims.v_head_dim
        total_q = sum(query_lens)
        batch = len(query_lens)

        # New tokens attend to themselves, bottom-right-aligned causal mask.
        self.new_tokens = mlakit.RaggedPrefill(heads, heads, dqk, dvo, max_batch=batch,
                                               max_q_tokens=total_q, max_kv_tokens=total_q, **common)
        q_indptr = indptr(query_lens)
        self.new_tokens.plan(q_indptr, q_indptr, causal=True, sm_scale=1.0 / math.sqrt(dqk))

        # Cache layout of this toy: request b's tokens (context then new) are contiguous, starting
        # at seq_start[b]. Chunk i covers context positions [i*chunk, (i+1)*chunk) of each request.
        self.seq_start = indptr([c + q for c, q in zip(context_lens, query_lens)])[:-1].tolist()
        self.chunks = []
        num_chunks = max((c + chunk_tokens - 1) // chunk_tokens for c in context_lens) if context_lens else 0
        for i in range(num_chunks):
            lens, rows = [], []
            for b, c in enumerate(context_lens):
                lo, hi = min(c, i * chunk_tokens), min(c, (i + 1) * chunk_tokens)
                lens.append(hi - lo)
                rows.extend(range(self.seq_start[b] + lo, self.seq_start[b] + hi))
            plan = mlakit.RaggedPrefill(heads, heads, dqk, dvo, max_batch=batch, max_q_tokens=total_q,
                                        max_kv_tokens=max(1, sum(lens)), **common)
            # Context precedes every new token: no mask. Requests with nothing in this chunk get
            # out = 0, lse = -inf, which merge_states passes through.
            plan.plan(q_indptr, indptr(lens), causal=False, sm_scale=1.0 / math.sqrt(dqk))
            self.chunks.append((plan, torch.tensor(rows, dtype=torch.long, device=device)))
        # Cache rows of the new tokens, in q order.
        self.new_rows = torch.tensor(
            [self.seq_start[b] + context_lens[b] + j for b, q in enumerate(query_lens) for j in range(q)],
            dtype=torch.long, device=device)


class MLAPrefill(torch.nn.Module):
    """The attention part of a DeepSeek MLA layer for prefill (q projection and o_proj omitted)."""

    def __init__(self, dims: MLADims):
        super().__init__()
        self.dims = dims
        out_features = dims.num_heads * (dims.qk_nope_head_dim + dims.v_head_dim)
        self.kv_b_proj = torch.nn.Linear(dims.kv_lora_rank, out_features, bias=False)

    def expand_kv(self, kv_c: torch.Tensor, k_pe: torch.Tensor):
        """Latent [T, kv_lora_rank] + rope key [T, rope] -> k [T, H, 192], v [T, H, 128]."""
        d = self.dims
        kv = self.kv_b_proj(kv_c).view(-1, d.num_heads, d.qk_nope_head_dim + d.v_head_dim)
        k_nope, v = kv.split([d.qk_nope_head_dim, d.v_head_dim], dim=-1)
        k = torch.cat([k_nope, k_pe[:, None, :].expand(-1, d.num_heads, -1)], dim=-1)
        return k, v  # v is a strided view of kv (last dim contiguous): no copy needed

    def forward(self, q: torch.Tensor, kv_c_cache: torch.Tensor, k_pe_cache: torch.Tensor,
                meta: MLAPrefillMetadata) -> torch.Tensor:
        """q: [total_new, H, 192] (nope + rope parts). Returns [total_new, H, 128]."""
        # 1) New tokens, causal.
        k, v = self.expand_kv(kv_c_cache[meta.new_rows], k_pe_cache[meta.new_rows])
        out, lse = mt.ragged_prefill(meta.new_tokens, q, k, v, return_lse=True)
        # 2) Context chunks, non-causal, merged into the running state.
        for plan, rows in meta.chunks:
            k, v = self.expand_kv(kv_c_cache[rows], k_pe_cache[rows])
            chunk_out, chunk_lse = mt.ragged_prefill(plan, q, k, v, return_lse=True)
            out, lse = mt.merge_states(chunk_out, chunk_lse, out, lse)
        return out


def naive_reference(module: MLAPrefill, q, kv_c_cache, k_pe_cache, meta: MLAPrefillMetadata):
    """float32 attention of each new token over its request's context + preceding new tokens."""
    d = module.dims
    outs = []
    q_off = 0
    for b, (c, n) in enumerate(zip(meta.context_lens, meta.query_lens)):
        rows = torch.arange(meta.seq_start[b], meta.seq_start[b] + c + n, device=q.device)
        k, v = module.expand_kv(kv_c_cache[rows], k_pe_cache[rows])
        qb = q[q_off:q_off + n].float()
        s = torch.einsum("qhd,khd->hqk", qb, k.float()) / math.sqrt(d.qk_head_dim)
        mask = torch.arange(c + n, device=q.device)[None, :] <= (c + torch.arange(n, device=q.device))[:, None]
        p = torch.softmax(s.masked_fill(~mask, -math.inf), dim=-1)
        outs.append(torch.einsum("hqk,khd->qhd", p, v.float()))
        q_off += n
    return torch.cat(outs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() and mlakit.cuda_device_count() else "cpu")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--chunk-tokens", type=int, default=256)
    ap.add_argument("--compile", action="store_true", help="run the forward under torch.compile")
    args = ap.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    dtype = torch.bfloat16
    dims = MLADims(num_heads=args.heads)
    context_lens = [0, 700, 33, 1000]  # cached tokens per request
    query_lens = [120, 64, 1, 257]     # new tokens per request
    total_tokens = sum(context_lens) + sum(query_lens)

    module = MLAPrefill(dims).to(device=device, dtype=dtype)
    kv_c_cache = torch.randn(total_tokens, dims.kv_lora_rank, device=device, dtype=dtype) * 0.1
    k_pe_cache = torch.randn(total_tokens, dims.qk_rope_head_dim, device=device, dtype=dtype)
    q = torch.randn(sum(query_lens), dims.num_heads, dims.qk_head_dim, device=device, dtype=dtype)

    meta = MLAPrefillMetadata(dims, context_lens, query_lens, args.chunk_tokens, dtype, device)
    forward = torch.compile(module.forward) if args.compile else module.forward
    with torch.no_grad():
        out = forward(q, kv_c_cache, k_pe_cache, meta)
        ref = naive_reference(module, q, kv_c_cache, k_pe_cache, meta)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    print(f"device={device} heads={dims.num_heads} chunks={len(meta.chunks)} "
          f"out={tuple(out.shape)} {out.dtype}  relative error vs naive attention: {err:.2e}")
    assert err < 2e-2, err


if __name__ == "__main__":
    main()
