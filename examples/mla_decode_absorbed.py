"""A DeepSeek engine's decode / MTP / DeepSeek-V3.2 sparse step, written against mlakit.LatentAttention.

Decode, speculative (MTP) verification and short extends run MLA in its *absorbed* form: instead of
expanding the cached latents into per-head K and V (what prefill does), each head's ``q_nope`` is
multiplied into the latent space by that head's slice of ``kv_b_proj`` (W_UK), every head attends
over the same cached rows ``[kv_c | k_pe]`` (576 wide; V = their first 512 columns), and the
512-wide result is brought back to ``v_head_dim`` by the head's other slice (W_UV):

    q_lat[t, h] = q_nope[t, h] @ W_UK[h]            [512]
    o_lat[t, h] = softmax(scale * [q_lat | q_pe] . cache_rows) @ kv_c_rows
    out[t, h]   = o_lat[t, h] @ W_UV[h].T           [v_head_dim]

The scale is the model's (``qk_head_dim ** -0.5``, times YaRN's mscale^2 in DeepSeek-V2/V3):
absorption changes no logit. DeepSeek-V3.2 attends each token to the ``topk`` cached positions its
indexer picks (``-1`` padded): the same call with ``topk`` and ``indices``, on the bf16 cache or on
V3.2's FP8 cache (``kv_cache_dtype="fp8_ds_mla"``: 656-byte rows, decoded as they are read).

The plan is built before the layers (host lengths and block table, microseconds, no device sync);
each layer then only launches, and a captured CUDA graph of the layers replays after re-planning.

Run:  python examples/mla_decode_absorbed.py [--device cuda] [--heads 16]
It checks every step against attention over the expanded cache (the non-absorbed form) and prints
the error. Its last step runs the MTP requests through FlashMLA's interface (mlakit.flash_mla).
"""

import argparse
import math

import torch

import mlakit

KV_LORA_RANK, ROPE, NOPE, V_DIM = 512, 64, 128, 128


def expanded_reference(q_nope, q_pe, rows, kv_b_proj, scale, visible):
    """The non-absorbed form for one token: K = [kv_c W_UK^T | k_pe], V = kv_c W_UV^T, per head."""
    heads = q_nope.shape[0]
    w = kv_b_proj.double().view(heads, NOPE + V_DIM, KV_LORA_RANK)
    kv_c, k_pe = rows[visible, :KV_LORA_RANK].double(), rows[visible, KV_LORA_RANK:].double()
    k_nope = torch.einsum("kl,hdl->hkd", kv_c, w[:, :NOPE])          # [H, keys, 128]
    v = torch.einsum("kl,hdl->hkd", kv_c, w[:, NOPE:])                # [H, keys, 128]
    s = (torch.einsum("hd,hkd->hk", q_nope.double(), k_nope) + q_pe.double() @ k_pe.T) * scale
    return torch.einsum("hk,hkd->hd", torch.softmax(s, dim=-1), v)


def to_fp8_ds_mla(cache):
    """A bf16 latent cache [blocks, page, 576] in DeepSeek-V3.2's fp8_ds_mla rows [blocks, page, 656]
    (uint8), as FlashMLA's quantizer (and MlaStep(kv_cache_dtype="fp8_ds_mla")) writes them: per 128
    values of kv_c the scale 2^ceil(log2(amax / 448)), the e4m3 codes, the four float32 scales, then
    k_pe in bf16. Returns the rows and the bf16 cache they decode to."""
    nb, bs, _ = cache.shape
    x = cache[..., :KV_LORA_RANK].float().reshape(nb, bs, 4, 128)
    s = torch.exp2(torch.ceil(torch.log2(torch.clamp(x.abs().amax(-1, keepdim=True) / 448, min=1e-4))))
    codes = (x / s).to(torch.float8_e4m3fn)
    rows = torch.cat([codes.view(torch.uint8).reshape(nb, bs, KV_LORA_RANK), s.reshape(nb, bs, 4).view(torch.uint8),
                      cache[..., KV_LORA_RANK:].contiguous().view(torch.uint8)], dim=-1)
    decoded = torch.cat([(codes.float() * s).reshape(nb, bs, KV_LORA_RANK).to(cache.dtype),
                         cache[..., KV_LORA_RANK:]], dim=-1)
    return rows.contiguous(), decoded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--heads", type=int, default=16)
    args = ap.parse_args()
    dev, H, dt = torch.device(args.device), args.heads, torch.bfloat16
    gen = torch.Generator().manual_seed(0)
    rnd = lambda *shape, s=1.0: (torch.randn(*shape, generator=gen) * s).to(dt).to(dev)

    # One layer's weights and its paged latent cache (an engine's MlaStep / cache write fills it).
    block_size, num_blocks = 64, 64
    kv_b_proj = rnd(H * (NOPE + V_DIM), KV_LORA_RANK, s=KV_LORA_RANK ** -0.5)
    w = kv_b_proj.view(H, NOPE + V_DIM, KV_LORA_RANK)
    w_uk, w_uv = w[:, :NOPE], w[:, NOPE:]                             # [H, 128, 512] each
    cache = rnd(num_blocks, block_size, KV_LORA_RANK + ROPE)
    scale = (NOPE + ROPE) ** -0.5                                     # the model's, not 576**-0.5

    # Four requests: decode (1 new token) and MTP (3 new tokens: causal among them), their
    # contexts (the new tokens' latents already in the cache) and their blocks.
    query_lens, kv_lens = [1, 3, 1, 3], [700, 129, 1, 2000]
    table = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    cols = max(math.ceil(k / block_size) for k in kv_lens)
    block_table, used = torch.zeros(len(kv_lens), cols, dtype=torch.int32), 0
    for r, k in enumerate(kv_lens):
        n = math.ceil(k / block_size)
        block_table[r, :n] = table[used:used + n]
        used += n

    attn = mlakit.LatentAttention(H, dtype=dt, device=args.device, block_size=block_size, num_blocks=num_blocks,
                                  max_batch=8, max_q_tokens=64, max_kv_tokens=8192, max_topk=256)
    T = sum(query_lens)
    q_nope, q_pe = rnd(T, H, NOPE), rnd(T, H, ROPE)

    def layer_forward():
        q_lat = torch.einsum("thd,hdl->thl", q_nope, w_uk)          # absorb: [T, H, 512]
        o_lat = attn.run(q_lat, cache, q_pe=q_pe)                    # [T, H, 512]
        return torch.einsum("thl,hdl->thd", o_lat, w_uv)             # [T, H, 128]

    def check(out, visible_of, what, cache_rows=cache):
        worst, t = 0.0, 0
        for r, (ql, kl) in enumerate(zip(query_lens, kv_lens)):
            slots = torch.stack([block_table[r, p // block_size] * block_size + p % block_size for p in range(kl)])
            rows = cache_rows.view(-1, KV_LORA_RANK + ROPE)[slots.to(dev)].cpu()
            for i in range(ql):
                ref = expanded_reference(q_nope[t].cpu(), q_pe[t].cpu(), rows, kv_b_proj.cpu(), scale,
                                         visible_of(r, t, i, kl))
                err = ((out[t].cpu().double() - ref).norm() / ref.norm()).item()
                worst, t = max(worst, err), t + 1
        print(f"{what}: device={args.device} heads={H} max relative error {worst:.2e}")
        assert worst < 2e-2, f"{what}: error {worst}"

    # Dense decode / MTP: new token i of a request sees positions <= kv_len - query_len + i.
    attn.plan(query_lens, kv_lens, block_table, sm_scale=scale)
    out = layer_forward()
    check(out, lambda r, t, i, kl: torch.arange(kl) <= kl - query_lens[r] + i, "decode/MTP")

    # DeepSeek-V3.2 sparse: each token's top-k request positions from the indexer, -1 padded.
    topk = 256
    indices = torch.full((T, topk), -1, dtype=torch.int32)
    picked = []
    for r, (ql, kl) in enumerate(zip(query_lens, kv_lens)):
        for i in range(ql):
            vis = kl - ql + i + 1
            sel = torch.randperm(vis, generator=gen)[:min(topk, vis)].to(torch.int32)
            indices[len(picked), :len(sel)] = sel
            picked.append(sel)
    attn.plan(query_lens, kv_lens, block_table, sm_scale=scale, topk=topk)
    q_lat = torch.einsum("thd,hdl->thl", q_nope, w_uk)
    o_lat = attn.run(q_lat, cache, q_pe=q_pe, indices=indices.to(dev))
    out = torch.einsum("thl,hdl->thd", o_lat, w_uv)

    def chosen(r, t, i, kl):
        mask = torch.zeros(kl, dtype=torch.bool)
        mask[picked[t].long()] = True
        return mask

    check(out, chosen, "DSA sparse")

    # The same sparse step on V3.2's FP8 cache: the object is told the format; the call is the same.
    cache8, decoded = to_fp8_ds_mla(cache)
    attn8 = mlakit.LatentAttention(H, dtype=dt, device=args.device, block_size=block_size, num_blocks=num_blocks,
                                   max_batch=8, max_q_tokens=64, max_kv_tokens=8192, max_topk=256,
                                   kv_cache_dtype="fp8_ds_mla")
    attn8.plan(query_lens, kv_lens, block_table, sm_scale=scale, topk=topk)
    o_lat = attn8.run(q_lat, cache8, q_pe=q_pe, indices=indices.to(dev))
    out = torch.einsum("thl,hdl->thd", o_lat, w_uv)
    check(out, chosen, "DSA sparse, fp8_ds_mla cache", cache_rows=decoded)

    # Engines written against FlashMLA keep their calls: mlakit.flash_mla has its interface (a
    # uniform number of new tokens per request, q as [batch, s_q, H, 576], a one-head cache view),
    # at any page size and head count. Here the two MTP requests, 3 new tokens each.
    import mlakit.flash_mla as flash_mla

    mtp = [r for r, ql in enumerate(query_lens) if ql == 3]
    starts = [sum(query_lens[:r]) for r in mtp]
    rows_of = [list(range(t0, t0 + 3)) for t0 in starts]
    q_flat = torch.cat([q_lat, q_pe], dim=-1)                       # [T, H, 576]
    q_mtp = torch.stack([q_flat[rows] for rows in rows_of])          # [2, 3, H, 576]
    seqlens = torch.tensor([kv_lens[r] for r in mtp], dtype=torch.int32, device=dev)
    sched, _ = flash_mla.get_mla_metadata()
    o_lat, lse = flash_mla.flash_mla_with_kvcache(q_mtp, cache.unsqueeze(2), block_table[mtp].to(dev), seqlens, 512,
                                                  sched, softmax_scale=scale, causal=True)
    worst = 0.0
    for j, r in enumerate(mtp):
        kl = kv_lens[r]
        slots = torch.stack([block_table[r, p // block_size] * block_size + p % block_size for p in range(kl)])
        rows = cache.view(-1, KV_LORA_RANK + ROPE)[slots.to(dev)].cpu()
        for i, t in enumerate(rows_of[j]):
            ref = expanded_reference(q_nope[t].cpu(), q_pe[t].cpu(), rows, kv_b_proj.cpu(), scale,
                                     torch.arange(kl) <= kl - 3 + i)
            got = torch.einsum("hl,hdl->hd", o_lat[j, i], w_uv).cpu().double()
            worst = max(worst, ((got - ref).norm() / ref.norm()).item())
    print(f"FlashMLA's interface, MTP: device={args.device} heads={H} max relative error {worst:.2e}")
    assert worst < 2e-2, f"FlashMLA's interface: error {worst}"


if __name__ == "__main__":
    main()
