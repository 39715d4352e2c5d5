"""The attention part of DeepSeek-Coder-V2-Lite's MLA layers, with random weights, for
bench/compare_mla.py: per-layer data, the per-step engine metadata, the float32 reference, and
the small PyTorch pieces the engines' paths share (cache write, up-projection, LSE merge).

Shapes (per layer): kv_b_proj [H*(qk_nope + v_head), kv_lora_rank] (the checkpoint layout), paged
latent cache [num_blocks, block_size, kv_lora_rank + qk_rope] (kv_c then k_pe, as vLLM's MLA
cache), per step: q [T, H, qk_nope + qk_rope] (RoPE already applied), the new tokens' kv_c [T, 512]
and k_pe [T, 64]. Output [T, H, v_head], ready for o_proj.
"""
from __future__ import annotations

import dataclasses
import math
from typing import List

import torch

import seed_schedule as S


@dataclasses.dataclass
class MLAConfig:
    layers: int = 27          # DeepSeek-Coder-V2-Lite
    heads: int = 16
    kv_lora_rank: int = 512
    qk_nope: int = 128
    qk_rope: int = 64
    v_head: int = 128
    block_size: int = 16

    @property
    def dqk(self) -> int:
        return self.qk_nope + self.qk_rope

    @property
    def latent(self) -> int:
        return self.kv_lora_rank + self.qk_rope

    @property
    def sm_scale(self) -> float:
        # 1/sqrt(192). (The checkpoint's YaRN mscale multiplies it by ~1.59; irrelevant to speed.)
        return 1.0 / math.sqrt(self.dqk)


class LayerData:
    """One layer's weights, its paged latent cache, and capacity-sized input buffers. Every step
    reads the first T rows of the same input buffers, so a slice's address depends on T only
    (what CUDA graph replays need) and a token's latent is a fixed row of kv_c/k_pe."""

    def __init__(self, cfg: MLAConfig, cap_tokens: int, num_blocks: int, dev, dtype, gen):
        H = cfg.heads
        self.w_kvb = (torch.randn(H * (cfg.qk_nope + cfg.v_head), cfg.kv_lora_rank, device=dev, generator=gen)
                      * cfg.kv_lora_rank ** -0.5).to(dtype)
        self.cache = torch.zeros(num_blocks, cfg.block_size, cfg.latent, device=dev, dtype=dtype)
        self.cache_flat = self.cache.view(-1, cfg.latent)
        self.q = torch.randn(cap_tokens, H, cfg.dqk, device=dev, generator=gen).to(dtype)
        self.kv_c = torch.randn(cap_tokens, cfg.kv_lora_rank, device=dev, generator=gen).to(dtype)
        self.k_pe = torch.randn(cap_tokens, cfg.qk_rope, device=dev, generator=gen).to(dtype)


class ModelData:
    def __init__(self, cfg: MLAConfig, cap_tokens: int, num_blocks: int, dev, dtype=torch.bfloat16, seed=0):
        self.cfg, self.dev, self.dtype = cfg, torch.device(dev), dtype
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(seed)
        self.layers = [LayerData(cfg, cap_tokens, num_blocks, self.dev, dtype, gen) for _ in range(cfg.layers)]


class StepInputs:
    """What the engine hands the attention backend for one step (vLLM's common metadata): host
    lengths, and device tensors in persistent buffers (slices of fixed addresses, refilled per
    step by load()): qo_indptr_dev [B+1] int32, slot_mapping [T] int64, block_table [cap_B,
    max_blocks] int32 (all rows of the buffer; rows >= B are stale)."""

    def __init__(self, step: S.Step, tables: S.BlockTables, layer_rows):
        self.index = step.index
        self.chunks = step.chunks
        self.T = step.tokens
        self.B = step.batch
        self.q_lens = [c.new for c in step.chunks]
        self.ctx_lens = [c.ctx for c in step.chunks]
        self.req_ids = [c.req for c in step.chunks]
        self.ctx_total = sum(self.ctx_lens)
        self.max_q = max(self.q_lens)
        self.max_ctx = max(self.ctx_lens)
        self.qo_indptr = _prefix(self.q_lens)
        self.ctx_indptr = _prefix(self.ctx_lens)
        self.qo_indptr_host = torch.tensor(self.qo_indptr, dtype=torch.int32)
        self.ctx_indptr_host = torch.tensor(self.ctx_indptr, dtype=torch.int32)
        self.slot_mapping_host = torch.tensor(
            [s for c in step.chunks for s in tables.slots(c.req, c.ctx, c.new)], dtype=torch.int64)
        self.block_table_host = torch.zeros(max(self.B, 1), max(tables.max_blocks, 1), dtype=torch.int32)
        for b, c in enumerate(step.chunks):
            t = tables.tables[c.req]
            self.block_table_host[b, :len(t)] = torch.tensor(t, dtype=torch.int32)
        self.tables = tables
        # Cache slots of every request's context, request after request: what vLLM's gather_cache
        # reads through the block table on the device. Built here, outside the timed step, so the
        # paths pay only the copy (vLLM pays no host loop for it either).
        self.ctx_gather_host = torch.tensor([tables.slot(c.req, p) for c in step.chunks for p in range(c.ctx)],
                                            dtype=torch.int64)
        # Rows of the layer input buffers holding each request's latents at positions [0, ctx+new):
        # layer_rows[req] is filled in schedule order (for the reference only).
        self.q_offsets = self.qo_indptr[:-1]
        for c, off in zip(step.chunks, self.q_offsets):
            layer_rows.setdefault(c.req, []).extend(range(off, off + c.new))
        self.rows_of = {c.req: list(layer_rows[c.req][:c.ctx + c.new]) for c in step.chunks}
        self.qo_indptr_dev = None
        self.slot_mapping = None
        self.block_table = None

    def load(self, bufs: "CommonBuffers"):
        """Copies this step's metadata into the persistent device buffers (outside the timed
        region: the engine builds it for every backend alike)."""
        self.qo_indptr_dev = bufs.qo_indptr[:self.B + 1]
        self.qo_indptr_dev.copy_(self.qo_indptr_host)
        self.slot_mapping = bufs.slot_mapping[:self.T]
        self.slot_mapping.copy_(self.slot_mapping_host)
        bufs.block_table.zero_()
        bufs.block_table[:self.block_table_host.shape[0], :self.block_table_host.shape[1]].copy_(self.block_table_host)
        self.block_table = bufs.block_table


class CommonBuffers:
    def __init__(self, cap_batch: int, cap_tokens: int, max_blocks: int, dev):
        self.qo_indptr = torch.zeros(cap_batch + 1, dtype=torch.int32, device=dev)
        self.slot_mapping = torch.zeros(cap_tokens, dtype=torch.int64, device=dev)
        self.block_table = torch.zeros(cap_batch, max(max_blocks, 1), dtype=torch.int32, device=dev)


def make_steps(schedule: List[S.Step], tables: S.BlockTables) -> List[StepInputs]:
    rows = {}
    return [StepInputs(st, tables, rows) for st in schedule]


def _prefix(lens):
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


def context_gather_index(st: StepInputs) -> torch.Tensor:
    """Host int64 [ctx_total]: the cache slots of every request's context, request after request
    (what vLLM's gather_cache reads through the block table)."""
    return st.ctx_gather_host


# ------------------------------------------------------------------------------------------------
# Pieces shared by the PyTorch re-creations of the engines' paths.

def write_cache(layer: LayerData, slot_mapping, kv_c, k_pe, cfg: MLAConfig):
    """vLLM's concat_and_cache_mla: the new tokens' kv_c and k_pe into their cache slots."""
    layer.cache_flat[:, :cfg.kv_lora_rank].index_copy_(0, slot_mapping, kv_c)
    layer.cache_flat[:, cfg.kv_lora_rank:].index_copy_(0, slot_mapping, k_pe)


def up_project(layer: LayerData, kv_c, k_pe, cfg: MLAConfig):
    """Latents -> k [N, H, 192] (k_nope with k_pe broadcast over heads, concatenated: a copy),
    v [N, H, 128] (a strided view of the projection, last dim contiguous), as vLLM does."""
    kv = torch.matmul(kv_c, layer.w_kvb.t()).view(-1, cfg.heads, cfg.qk_nope + cfg.v_head)
    k_nope, v = kv.split([cfg.qk_nope, cfg.v_head], dim=-1)
    k = torch.cat((k_nope, k_pe.view(-1, 1, cfg.qk_rope).expand(-1, cfg.heads, -1)), dim=-1)
    return k, v


def merge_by_lse(o_a, lse_a, o_b, lse_b, base2: bool = False):
    """Merges two partial attentions over disjoint keys by their LSE (vLLM's merge_attn_states).
    o_*: [T, H, D]; lse_*: [T, H] (views of other layouts fine). An empty side (lse = +-inf: FA2
    writes +inf for rows without keys, others -inf) gets weight 0. base2: LSEs in log2 (FlashInfer)."""
    ninf = float("-inf")
    la = torch.where(torch.isinf(lse_a), ninf, lse_a.float())
    lb = torch.where(torch.isinf(lse_b), ninf, lse_b.float())
    m = torch.maximum(la, lb)
    m = torch.where(torch.isinf(m), 0.0, m)
    if base2:
        wa, wb = torch.exp2(la - m), torch.exp2(lb - m)
    else:
        wa, wb = torch.exp(la - m), torch.exp(lb - m)
    s = wa + wb
    inv = torch.where(s > 0, 1.0 / s, 0.0)
    out = o_a.float() * (wa * inv).unsqueeze(-1) + o_b.float() * (wb * inv).unsqueeze(-1)
    return out.to(o_a.dtype)


_MERGE = {"fn": merge_by_lse, "kind": "eager"}


def set_merge(kind: str, log=print):
    """'compiled': torch.compile(dynamic=True) fuses the merge into one or two Triton kernels
    (close to vLLM's merge kernel; eager torch launches ~15 elementwise kernels); falls back to
    eager when compiling fails (checked on a small call)."""
    _MERGE.update(fn=merge_by_lse, kind="eager")
    if kind != "compiled":
        return "eager"
    try:
        cfg_ = torch._dynamo.config
        for knob in ("cache_size_limit", "recompile_limit"):  # layouts x base: a few variants
            if hasattr(cfg_, knob):
                setattr(cfg_, knob, max(64, getattr(cfg_, knob)))
        fn = torch.compile(merge_by_lse, dynamic=True)
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        for base2 in (False, True):
            for n in (7, 13):
                a = torch.randn(n, 2, 8, device=dev, dtype=torch.bfloat16)
                la = torch.randn(n, 2, device=dev)
                want = merge_by_lse(a, la, a, la.t().contiguous().t(), base2)
                got = fn(a, la, a, la.t().contiguous().t(), base2)
                if not torch.allclose(got.float(), want.float(), atol=1e-2):
                    raise RuntimeError("compiled merge disagrees with eager")
        _MERGE.update(fn=fn, kind="compiled")
    except Exception as ex:  # noqa: BLE001
        log(f"compiled merge unavailable ({type(ex).__name__}: {ex}); using eager torch ops")
    return _MERGE["kind"]


def merge(o_a, lse_a, o_b, lse_b, base2=False):
    try:
        return _MERGE["fn"](o_a, lse_a, o_b, lse_b, base2)
    except Exception as ex:  # noqa: BLE001  (a recompile for a new shape can fail late)
        if _MERGE["kind"] != "compiled":
            raise
        print(f"compiled merge failed ({type(ex).__name__}: {ex}); eager from now on", flush=True)
        _MERGE.update(fn=merge_by_lse, kind="eager (compile failed during the run)")
        return merge_by_lse(o_a, lse_a, o_b, lse_b, base2)


# ------------------------------------------------------------------------------------------------
# float32 reference from the original latents (independent of the cache and of every path).

# The latent cache formats mlakit's step takes (MlaStep(kv_cache_dtype=...)): the bytes of a row, and
# the latents a row hands back -- what the step attends, for the reference of a path on such a cache.
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_ds_mla")
FP8_K_SCALE = 1.0  # the fp8 cache's layer scale: vLLM's default layer._k_scale


def cache_row_bytes(cfg: MLAConfig, kv_cache_dtype: str, dtype=torch.bfloat16) -> int:
    if kv_cache_dtype == "fp8_ds_mla":
        return cfg.kv_lora_rank + 4 * (cfg.kv_lora_rank // 128) + 2 * cfg.qk_rope
    return cfg.latent * (1 if kv_cache_dtype == "fp8" else torch.finfo(dtype).bits // 8)


def through_cache(kv_c, k_pe, kv_cache_dtype: str):
    """(kv_c, k_pe) as a cache of this format holds them, in their dtype: vLLM's fp8 (e4m3 of
    x / scale, saturated) or FlashMLA's fp8_ds_mla quantizer (power-of-two scale per 128 values)."""
    if kv_cache_dtype == "auto":
        return kv_c, k_pe
    if kv_cache_dtype == "fp8":
        x = torch.cat([kv_c, k_pe], dim=-1).float() / FP8_K_SCALE
        y = (x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float() * FP8_K_SCALE).to(kv_c.dtype)
        return y[:, :kv_c.shape[1]], y[:, kv_c.shape[1]:]
    x = kv_c.float().reshape(-1, kv_c.shape[1] // 128, 128)
    s = torch.pow(2, (x.abs().amax(dim=-1, keepdim=True) / 448.0).clamp_min(1e-4).log2().ceil())
    return ((x / s).to(torch.float8_e4m3fn).float() * s).reshape(kv_c.shape).to(kv_c.dtype), k_pe


def reference_layer(cfg: MLAConfig, layer: LayerData, st: StepInputs, rows_per_req: int = 0,
                    kv_cache_dtype: str = "auto"):
    """(rows, out [len(rows), H, v_head] float32) for layer `layer` of step st: each new token
    attends to its request's [context; new] latents up to itself (bottom-right causal). The K/V
    come from the same bf16 up-projection the engines use (not what is being tested); attention
    in float32. rows_per_req > 0 samples that many rows per request (+ first/last), else all.
    kv_cache_dtype: the latents as a cache of that format holds them (through_cache)."""
    all_rows, outs = [], []
    for c, off in zip(st.chunks, st.q_offsets):
        src = torch.tensor(st.rows_of[c.req], dtype=torch.long, device=layer.q.device)
        k, v = up_project(layer, *through_cache(layer.kv_c[src], layer.k_pe[src], kv_cache_dtype), cfg)  # [L, H, *]
        local = list(range(c.new))
        if rows_per_req and c.new > rows_per_req + 2:
            step_ = c.new / rows_per_req
            local = sorted({0, c.new - 1} | {int(i * step_) for i in range(rows_per_req)})
        li = torch.tensor(local, dtype=torch.long, device=layer.q.device)
        qi = layer.q[off + li].float()                                        # [n, H, 192]
        s = torch.einsum("nhd,khd->hnk", qi, k.float()) * cfg.sm_scale
        j = torch.arange(c.ctx + c.new, device=s.device).view(1, 1, -1)
        s = s.masked_fill(j > (c.ctx + li).view(1, -1, 1), float("-inf"))
        p = torch.softmax(s, dim=-1)
        outs.append(torch.einsum("hnk,khd->nhd", p, v.float()))
        all_rows.extend(off + i for i in local)
    return all_rows, torch.cat(outs)


def relerr(out, rows, ref):
    """max over (row, head) of max|o - r| / max|r| (as bench/compare.py)."""
    o = out[torch.tensor(rows, dtype=torch.long, device=out.device)].float()
    if not torch.isfinite(o).all():
        return float("inf")
    diff = (o - ref).abs().amax(dim=-1)
    scale = ref.abs().amax(dim=-1)
    return float(torch.where(scale > 0, diff / scale.clamp_min(1e-30), diff).max())
