"""Latent-space (absorbed) MLA workloads for bench/compare_latent.py: their shapes, the work and
bytes they count, their inputs over one paged latent cache, and the float32 reference.

Every workload reads one bf16 cache [num_blocks, 64, 576] (kv_c 512 | k_pe 64) through a shuffled
block table; q is [T, H, 576] (q_nope absorbed through W_UK, then q_pe); out [T, H, 512]. Peers
with other page sizes read the same memory through views (a 64-row block is 64/P pages of P rows),
so every method reads the same bytes at the same addresses.

Counting, as the peers count (shared/design/absorbed-mla.md section 1):
  flops  2 * (576 + 512) * H per visible (query token, key) pair: dense, the keys a new token sees
         (bottom-right causal among a request's new tokens); sparse, topk per query token (invalid
         entries counted too, as FlashMLA counts them; these workloads have none)
  bytes  latent rows read from the cache, 576 * 2 B per distinct row per request (dense: kv_len
         rows; sparse: the distinct positions a request's indices name). FlashMLA's sparse count
         (every index gathered, s_q * topk rows) is kept beside it as gathered_bytes. FP8 workloads
         count their 656-byte rows.

FP8 workloads (family fp8) read DeepSeek-V3.2's fp8_ds_mla cache [num_blocks, 64, 656] (e4m3 codes
of kv_c with a power-of-two scale per 128 values, k_pe in bf16), quantized from the random bf16
cache as FlashMLA's quantizer does, or (fp8_dense_*) vLLM's fp8 cache [num_blocks, 64, 576], one
code a value and one scale for the layer (a power of two >= amax / 448); the bf16 cache is then
replaced by the rows the FP8 cache decodes to (exactly representable in bf16), so bf16 methods and
the reference see the same values.
"""
from __future__ import annotations

import dataclasses
import math
import random
from typing import List

L, R, BS = 512, 64, 64       # kv_lora_rank, qk_rope_head_dim, the cache's block (FlashMLA's page)
D = L + R
ROW_BYTES = D * 2            # one bf16 latent row
FP8_ROW_BYTES = {"ds_mla": 656, "layer": D}  # one fp8_ds_mla / fp8 row
SCALE = 192 ** -0.5          # DeepSeek's qk_head_dim^-0.5 (no YaRN factor: random data)
RAGGED_SEED = 1234


@dataclasses.dataclass
class LatentWorkload:
    name: str
    family: str              # "decode" | "mtp" | "sparse"
    heads: int
    q_len: int               # new tokens per request (uniform: FlashMLA's dense kernel needs it)
    kv_lens: List[int]       # cached tokens per request, the new ones included
    topk: int = 0            # > 0: sparse (DSA); each query token names topk of its visible positions
    smoke: bool = False
    fp8: str = ""            # "ds_mla" / "layer": the cache's FP8 format (bf16 methods read the rows it decodes to)

    @property
    def row_bytes(self) -> int:
        return FP8_ROW_BYTES[self.fp8] if self.fp8 else ROW_BYTES

    @property
    def batch(self) -> int:
        return len(self.kv_lens)

    @property
    def total_q(self) -> int:
        return self.batch * self.q_len

    @property
    def sparse(self) -> bool:
        return self.topk > 0

    @property
    def causal(self) -> bool:
        return not self.sparse and self.q_len > 1

    def visible_pairs(self) -> int:
        if self.sparse:
            return self.total_q * self.topk
        return sum(max(0, k - self.q_len + i + 1) for k in self.kv_lens for i in range(self.q_len))

    def flops(self) -> int:
        return 2 * (D + L) * self.heads * self.visible_pairs()

    def dense_bytes(self) -> int:
        return sum(self.kv_lens) * self.row_bytes

    def describe(self) -> str:
        ctx = (f"ctx {self.kv_lens[0]}" if len(set(self.kv_lens)) == 1 else
               f"ctx {min(self.kv_lens)}-{max(self.kv_lens)} (mean {sum(self.kv_lens) / self.batch:.0f})")
        kind = f"top-{self.topk}" if self.sparse else ("causal" if self.causal else "")
        fp8 = {"": "", "ds_mla": ", fp8_ds_mla cache", "layer": ", fp8 cache (a scale a layer)"}[self.fp8]
        return f"B={self.batch} x {self.q_len} new, {ctx}, H={self.heads} {kind}".rstrip() + fp8


def ragged_lens(n, lo, hi, seed=RAGGED_SEED):
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(n)]


def all_workloads(smoke=False) -> List[LatentWorkload]:
    """The issue's targets; smoke: the same list at tiny sizes (seconds on a CPU)."""
    if smoke:
        dec_b, ctx, lo, hi, mtp_b = 4, 256, 64, 512, {1: 4, 2: 3, 4: 3, 64: 2, 128: 2}
        sp_q, sp_topk, sp_ctx = 64, 128, 1024
        fd_b, fd_ctx = 4, 512
    else:
        # MTP batches: one launch of a few ms at most at 128 heads (extend-128 x 8 requests:
        # 2.3 TFLOP), wide enough to fill 132 SMs at 16 heads.
        dec_b, ctx, lo, hi, mtp_b = 128, 4096, 512, 8192, {1: 128, 2: 64, 4: 64, 64: 16, 128: 8}
        sp_q, sp_topk, sp_ctx = 4096, 2048, 32768
        fd_b, fd_ctx = 128, 8192   # FlashMLA's FP8 sparse decode figure: b 128, s_q 2, top-k 2048
    out = []
    for h in (16, 128):
        out.append(LatentWorkload(f"decode_h{h}", "decode", h, 1, [ctx] * dec_b, smoke=smoke))
    for h in (16, 128):
        out.append(LatentWorkload(f"ragged_h{h}", "decode", h, 1, ragged_lens(dec_b, lo, hi), smoke=smoke))
    for q in (2, 4, 64, 128):
        for h in (16, 128):
            name = f"mtp{q}_h{h}" if q <= 4 else f"extend{q}_h{h}"
            out.append(LatentWorkload(name, "mtp", h, q, [ctx] * mtp_b[q], smoke=smoke))
    for h in (128, 64, 32, 16):
        out.append(LatentWorkload(f"sparse_h{h}", "sparse", h, sp_q, [sp_ctx], topk=sp_topk, smoke=smoke))
    for h in (128, 64, 16):
        out.append(LatentWorkload(f"fp8_decode_h{h}", "fp8", h, 2, [fd_ctx] * fd_b, topk=sp_topk, smoke=smoke,
                                  fp8="ds_mla"))
    for h in (128, 64):
        out.append(LatentWorkload(f"fp8_sparse_h{h}", "fp8", h, sp_q, [sp_ctx], topk=sp_topk, smoke=smoke,
                                  fp8="ds_mla"))
    for h in (16, 128):
        out.append(LatentWorkload(f"fp8_dense_decode_h{h}", "fp8", h, 1, [ctx] * dec_b, smoke=smoke, fp8="layer"))
    # 1, 2, 4 and 64 new tokens at 128 heads read each cached row 2, 4, 8 and 128 times (two
    # 64-row items a token): where decoding the rows once starts to pay (kDecodeOnceReads).
    for q in (1, 2, 4, 64):
        name = {1: "fp8_ds_decode_h128"}.get(q, f"fp8_mtp{q}_h128" if q <= 4 else f"fp8_extend{q}_h128")
        out.append(LatentWorkload(name, "fp8", 128, q, [ctx] * mtp_b[q], smoke=smoke, fp8="ds_mla"))
    return out


FAMILIES = {"decode": "decode: 1 new token per request (uniform and ragged contexts)",
            "mtp": "MTP / extend: new tokens per request, causal among them",
            "sparse": "sparse prefill (DSA): one request, every query token its own top-k",
            "fp8": "on FP8 caches: fp8_ds_mla (DSA sparse decode, 2 new tokens, sparse prefill; at 128 heads decode, MTP-2, MTP-4 and extend-64); fp8 (dense decode)"}


def select(names, smoke=False):
    """Workloads by name or family name (decode, mtp, sparse); all when names is empty."""
    ws = all_workloads(smoke)
    if not names:
        return ws
    by_name = {w.name: w for w in ws}
    out = []
    for n in names:
        if n in FAMILIES:
            out += [w for w in ws if w.family == n and w not in out]
        elif n in by_name:
            if by_name[n] not in out:
                out.append(by_name[n])
        else:
            raise ValueError(f"unknown workload {n!r}; known: {', '.join(list(FAMILIES) + list(by_name))}")
    return out


class Inputs:
    """One workload's tensors on `dev`: the cache, the block table (host and device), q, and for
    sparse workloads the indices as request-local positions and as global cache slots."""

    def __init__(self, torch, w: LatentWorkload, dev, seed=0):
        self.w = w
        g = torch.Generator(device="cpu").manual_seed(seed)
        gd = torch.Generator(device=dev).manual_seed(seed + 1)
        self.pages = [(k + BS - 1) // BS for k in w.kv_lens]
        self.num_blocks = sum(self.pages)
        perm = torch.randperm(self.num_blocks, generator=g).to(torch.int32)
        cols = max(self.pages)
        table = torch.zeros(w.batch, cols, dtype=torch.int32)  # unused entries name block 0
        at = 0
        for b, n in enumerate(self.pages):
            table[b, :n] = perm[at:at + n]
            at += n
        self.table_h = table
        self.table = table.to(dev)
        self.q_lens_h = torch.full((w.batch,), w.q_len, dtype=torch.int32)
        self.kv_lens_h = torch.tensor(w.kv_lens, dtype=torch.int32)
        self.cache = torch.randn(self.num_blocks, BS, D, device=dev, dtype=torch.bfloat16, generator=gd)
        self.cache_fp8 = self.k_scale = None
        if w.fp8 == "ds_mla":
            self.cache_fp8 = ds_mla_quantize(torch, self.cache)
            self.cache = ds_mla_decode(torch, self.cache_fp8)
        elif w.fp8 == "layer":
            amax = self.cache.float().abs().amax()
            self.k_scale = torch.exp2(torch.ceil(torch.log2(amax / 448))).reshape(1)
            self.cache_fp8 = (self.cache.float() / self.k_scale).to(torch.float8_e4m3fn).view(torch.uint8)
            self.cache = (self.cache_fp8.view(torch.float8_e4m3fn).float() * self.k_scale).to(torch.bfloat16)
        self.q = torch.randn(w.total_q, w.heads, D, device=dev, dtype=torch.bfloat16, generator=gd)
        self.positions = self.slots = None
        self.bytes = w.dense_bytes()
        self.gathered_bytes = None
        if w.sparse:
            self._make_indices(torch, gd, dev)

    def _make_indices(self, torch, gd, dev):
        """topk distinct positions among each token's causal-visible ones, in the indexer's
        (score) order, not sorted by position."""
        w = self.w
        pos, slots, distinct = [], [], 0
        for b, kv in enumerate(w.kv_lens):
            visible = kv - w.q_len + 1 + torch.arange(w.q_len, device=dev)               # [q]
            if int(visible.min()) < w.topk:
                raise ValueError(f"{w.name}: a token sees fewer than topk={w.topk} positions")
            score = torch.rand(w.q_len, kv, device=dev, generator=gd)
            score.masked_fill_(torch.arange(kv, device=dev).view(1, -1) >= visible.view(-1, 1), -1.0)
            p = score.topk(w.topk, dim=-1).indices                                         # int64 [q, topk]
            del score
            t = self.table[b].long()
            slots.append((t[p // BS] * BS + p % BS).to(torch.int32))
            pos.append(p.to(torch.int32))
            distinct += int(torch.unique(p).numel())
        self.positions = torch.cat(pos).contiguous()
        self.slots = torch.cat(slots).contiguous()
        self.bytes = distinct * w.row_bytes
        self.gathered_bytes = w.total_q * w.topk * w.row_bytes

    def request_slots(self, torch, b):
        """Cache slots of request b's positions 0 .. kv_len - 1 (int64, on the device)."""
        n = self.w.kv_lens[b]
        t = self.table[b, :self.pages[b]].long()
        return (t.view(-1, 1) * BS + torch.arange(BS, device=t.device).view(1, -1)).view(-1)[:n]


def ds_mla_quantize(torch, cache):
    """bf16 [blocks, bs, 576] -> fp8_ds_mla uint8 [blocks, bs, 656], as FlashMLA's quantizer: per 128
    latent values the scale 2^ceil(log2(max(amax / 448, 1e-4))), codes e4m3(x / scale), the four
    scales as float32, then k_pe's bf16 bytes."""
    nb, bs, _ = cache.shape
    x = cache[..., :L].float().view(nb, bs, 4, 128)
    s = torch.exp2(torch.ceil(torch.log2(torch.clamp(x.abs().amax(-1, keepdim=True) / 448, min=1e-4))))
    codes = (x / s).to(torch.float8_e4m3fn).view(torch.uint8).view(nb, bs, L)
    return torch.cat([codes, s.view(nb, bs, 4).contiguous().view(torch.uint8),
                      cache[..., L:].contiguous().view(torch.uint8)], dim=-1).contiguous()


def ds_mla_decode(torch, c8):
    """fp8_ds_mla rows -> the bf16 rows they hold (code x scale, exact for power-of-two scales)."""
    nb, bs, _ = c8.shape
    codes = c8[..., :L].contiguous().view(torch.float8_e4m3fn).float().view(nb, bs, 4, 128)
    scales = c8[..., L:L + 16].contiguous().view(torch.float32).view(nb, bs, 4, 1)
    rope = c8[..., L + 16:].contiguous().view(torch.bfloat16)
    return torch.cat([(codes * scales).view(nb, bs, L).to(torch.bfloat16), rope], dim=-1).contiguous()


def sample_tokens(w: LatentWorkload, n_random=8, seed=0):
    """Query tokens to check: the first and last new token of the first, last and a few random
    requests, and some random tokens."""
    rng = random.Random(seed)
    reqs = {0, w.batch - 1} | {rng.randrange(w.batch) for _ in range(3)}
    toks = set()
    for b in reqs:
        toks |= {b * w.q_len, b * w.q_len + w.q_len - 1}
    toks |= {rng.randrange(w.total_q) for _ in range(n_random)}
    return sorted(toks)


def reference(torch, inp: Inputs, tokens):
    """float32 out [len(tokens), H, 512] on the inputs' device, from the bf16 inputs."""
    w = inp.w
    flat = inp.cache.view(-1, D)
    out = torch.empty(len(tokens), w.heads, L, device=inp.q.device, dtype=torch.float32)
    by_req = {}
    for n, t in enumerate(tokens):
        by_req.setdefault(t // w.q_len, []).append(n)
    for b, ns in by_req.items():
        rows = None if w.sparse else flat[inp.request_slots(torch, b)].float()          # [kv, 576]
        for n in ns:
            t = tokens[n]
            if w.sparse:
                k = flat[inp.slots[t].long()].float()
            else:
                k = rows[:w.kv_lens[b] - w.q_len + (t - b * w.q_len) + 1]
            s = (inp.q[t].float() @ k.T) * SCALE                                           # [H, keys]
            out[n] = torch.softmax(s, dim=-1) @ k[:, :L]
    return out


def relerr(torch, out, ref, tokens):
    """max over (token, head) of max|o - r| / max|r|; inf when the rows hold a NaN or inf."""
    o = out[torch.tensor(tokens, device=out.device)].float()
    if not bool(torch.isfinite(o).all()):
        return math.inf
    diff = (o - ref).abs().amax(dim=-1)
    scale = ref.abs().amax(dim=-1)
    return float(torch.where(scale > 0, diff / scale.clamp_min(1e-30), diff).max())
