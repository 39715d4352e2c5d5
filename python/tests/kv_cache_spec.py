"""The MLA step's FP8 latent cache formats written down in PyTorch, as their engines' quantizers
compute them, for the Python tests (independent of mlakit's codec):

* ``fp8`` -- vLLM's concat_and_cache_mla with ``kv_cache_dtype="fp8"``: the 576 values
  ``[kv_c, k_pe]`` as e4m3 codes of ``x / k_scale`` (float32), saturated to +-448.
* ``fp8_ds_mla`` -- FlashMLA's ``quantize_k_cache`` (tests/quant.py, DeepSeek-V3.2): per 128
  values ``scale = 2 ** ceil(log2(max(amax / 448, 1e-4)))``, codes ``e4m3(x / scale)``; rows of
  656 bytes: 512 codes, 4 float32 scales, 64 bf16 RoPE values.

And a step over such a cache for the tests: its tensors, the cache expected after it, and a
float64 re-creation of its output on the dequantized latents.
"""

import math

import torch


def encode(kind, kv_c, k_pe, k_scale=None):
    """uint8 rows [N, 576 or 656] of N tokens' bf16/fp16 kv_c [N, 512 / L] and k_pe [N, R]."""
    if kind == "fp8":
        x = torch.cat([kv_c, k_pe], dim=-1).float() / k_scale.float()
        return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    assert kind == "fp8_ds_mla" and kv_c.shape[-1] == 512 and k_pe.shape[-1] == 64
    x = kv_c.float().reshape(-1, 4, 128)
    s = x.abs().amax(dim=-1) / 448.0
    s = torch.pow(2, s.clamp_min(1e-4).log2().ceil())
    codes = (x / s[..., None]).to(torch.float8_e4m3fn).view(torch.uint8).reshape(-1, 512)
    return torch.cat([codes, s.contiguous().view(torch.uint8), k_pe.contiguous().view(torch.uint8)], dim=-1)


def decode(kind, rows, k_scale=None):
    """float64 latents [N, 576] of uint8 rows: code x scale (RoPE of fp8_ds_mla as stored)."""
    rows = rows.reshape(-1, rows.shape[-1]).contiguous()
    if kind == "fp8":
        return rows.view(torch.float8_e4m3fn).double() * k_scale.double()
    codes = rows[:, :512].contiguous().view(torch.float8_e4m3fn).double().reshape(-1, 4, 128)
    scales = rows[:, 512:528].contiguous().view(torch.float32).double()
    rope = rows[:, 528:].contiguous().view(torch.bfloat16).double()
    return torch.cat([(codes * scales[..., None]).reshape(-1, 512), rope], dim=-1)


DN, R, DV, BS = 128, 64, 128, 16


def encode_cache(kind, cache, k_scale=None):
    """A paged 16-bit cache [blocks, page, L + R] (R = 64) in `kind`'s rows: uint8 [blocks, page,
    L + R or 656]."""
    rows = cache.reshape(-1, cache.shape[-1])
    return encode(kind, rows[:, :-R], rows[:, -R:], k_scale).reshape(*cache.shape[:2], -1)


def decode_cache(kind, cache, k_scale=None):
    """The float64 rows [blocks, page, L + R] a paged FP8 cache holds (decode, page by page kept)."""
    return decode(kind, cache, k_scale).reshape(*cache.shape[:2], -1)


def make_case(kind, q_lens, ctx_lens, seed, heads):
    """A step's bf16 CPU tensors over an FP8 cache of random encoded latents (k_scale 0-d, as
    vLLM's layer._k_scale); kv_lora_rank 512 for fp8_ds_mla, 64 for fp8."""
    gen = torch.Generator().manual_seed(seed)
    L = 512 if kind == "fp8_ds_mla" else 64
    need = [-(-(c + q) // BS) for q, c in zip(q_lens, ctx_lens)]
    num_blocks = sum(need) + 2
    ids = torch.randperm(num_blocks, generator=gen)
    bt = torch.full((len(q_lens), max(need) + 1), -1, dtype=torch.int32)
    k = 0
    for b, n in enumerate(need):
        bt[b, :n] = ids[k:k + n]
        k += n
    tq = sum(q_lens)
    bf16 = dict(generator=gen)
    k_scale = torch.tensor(0.0173, dtype=torch.float32)  # 0-d, as vLLM's layer._k_scale
    ctx_c = torch.randn(num_blocks * BS, L, **bf16).bfloat16()
    ctx_pe = torch.randn(num_blocks * BS, R, **bf16).bfloat16()
    cache = encode(kind, ctx_c, ctx_pe, k_scale).reshape(num_blocks, BS, -1).contiguous()
    H = heads
    return dict(kind=kind, L=L, H=H, q_lens=q_lens, ctx_lens=ctx_lens, bt=bt, num_blocks=num_blocks, k_scale=k_scale,
                q=torch.randn(tq, H, DN + R, **bf16).bfloat16(), kv_c=torch.randn(tq, L, **bf16).bfloat16(),
                k_pe=torch.randn(tq, R, **bf16).bfloat16(),
                w=(torch.randn(H * (DN + DV), L, **bf16) / math.sqrt(L)).bfloat16(), cache=cache)


def slots(c):
    out = []
    for b, (n, ctx) in enumerate(zip(c["q_lens"], c["ctx_lens"])):
        out += [int(c["bt"][b, p // BS]) * BS + p % BS for p in range(ctx, ctx + n)]
    return torch.tensor(out, dtype=torch.long)


def expected_cache(c):
    want = c["cache"].clone().reshape(c["num_blocks"] * BS, -1)
    want[slots(c)] = encode(c["kind"], c["kv_c"], c["k_pe"], c["k_scale"])
    return want.reshape(c["cache"].shape)


def reference(c):
    """float64: context latents decoded from the cache, new tokens as the cache will hold them."""
    kind, L, H, w = c["kind"], c["L"], c["H"], c["w"].double()
    rows = c["cache"].reshape(c["num_blocks"] * BS, -1)
    new_lat = decode(kind, encode(kind, c["kv_c"], c["k_pe"], c["k_scale"]), c["k_scale"])
    outs, q0 = [], 0
    for b, (n, ctx) in enumerate(zip(c["q_lens"], c["ctx_lens"])):
        pos = torch.arange(ctx)
        ctx_slots = c["bt"][b, pos // BS].long() * BS + pos % BS
        lat = torch.cat([decode(kind, rows[ctx_slots], c["k_scale"]), new_lat[q0:q0 + n]])
        kv = (lat[:, :L] @ w.T).view(-1, H, DN + DV)
        k = torch.cat([kv[..., :DN], lat[:, None, L:].expand(-1, H, R)], dim=-1)
        s = torch.einsum("qhd,khd->hqk", c["q"][q0:q0 + n].double(), k) / math.sqrt(DN + R)
        mask = torch.arange(ctx + n)[None, :] <= (ctx + torch.arange(n))[:, None]
        p = torch.softmax(s.masked_fill(~mask, -math.inf), dim=-1)
        outs.append(torch.einsum("hqk,khd->qhd", p, kv[..., DN:]))
        q0 += n
    return torch.cat(outs)
