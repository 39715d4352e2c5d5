"""An engine's MLA attention through one mlakit.MlaStep: prompts prefilled, then decode and MTP
steps on the same paged latent cache, every step planned once and run per layer.

The step chooses per request: prompt chunks up-project their context with ``kv_b_proj`` and run
prefill attention; requests with at most ``absorb_max_query_len`` new tokens (decode, MTP
verification, short extends) attend in latent space instead (q absorbed through W_UK, the latent
rows read once for every head, W_UV after). ``info.absorbed_requests`` says which. Each step is
checked against attention over the expanded cache (K and V materialized per head).

Run:  python examples/mla_step_serving.py [--device cuda] [--heads 16]
"""

import argparse
import math

import torch

import mlakit

L, R, DN, DV, BS = 512, 64, 128, 128, 16


def expanded_attention(cache, block_table, w, q, q_lens, ctx_lens):
    """Per request: every position's latent (read back from the cache the step wrote), K = [latent
    W_K | k_pe], V = latent W_V per head, causal softmax for the new tokens. float32."""
    heads = q.shape[1]
    outs, t = [], 0
    for b, (n, ctx) in enumerate(zip(q_lens, ctx_lens)):
        pos = torch.arange(ctx + n, device=cache.device)
        lat = cache[block_table[b, pos // BS].long(), pos % BS].float()
        kv = (lat[:, :L] @ w.float().T).view(-1, heads, DN + DV)
        k = torch.cat([kv[..., :DN], lat[:, None, L:].expand(-1, heads, R)], dim=-1)
        s = torch.einsum("qhd,khd->hqk", q[t:t + n].float(), k) / math.sqrt(DN + R)
        mask = pos[None, :] <= (ctx + torch.arange(n, device=cache.device))[:, None]
        p = torch.softmax(s.masked_fill(~mask, -math.inf), dim=-1)
        outs.append(torch.einsum("hqk,khd->qhd", p, kv[..., DN:]))
        t += n
    return torch.cat(outs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--heads", type=int, default=16)
    args = ap.parse_args()
    dev, heads = torch.device(args.device), args.heads
    torch.manual_seed(0)
    prompts = [40, 7, 100]
    # Step 0 prefills the prompts; then two decode steps and an MTP step (3 draft tokens each).
    steps = [prompts, [1, 1, 1], [1, 1, 1], [3, 3, 3]]
    final = [p + sum(s[b] for s in steps[1:]) for b, p in enumerate(prompts)]
    blocks = [-(-n // BS) for n in final]
    block_table = torch.zeros(len(prompts), max(blocks), dtype=torch.int32)
    ids = torch.randperm(sum(blocks), dtype=torch.int32)
    for b, n in enumerate(blocks):
        block_table[b, :n] = ids[sum(blocks[:b]):sum(blocks[:b]) + n]
    cache = torch.zeros(sum(blocks), BS, L + R, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(heads * (DN + DV), L) / math.sqrt(L)).to(dev, torch.bfloat16)

    # absorb_max_query_len=4: decode and MTP requests attend in latent space on every backend
    # (-1, the default, takes the backend's measured crossover).
    step = mlakit.MlaStep(heads, dtype=torch.bfloat16, device=dev, block_size=BS, num_blocks=cache.shape[0],
                          max_batch=len(prompts), max_tokens=sum(prompts), max_context_tokens=sum(final),
                          absorb_max_query_len=4)
    ctx = [0] * len(prompts)
    for i, q_lens in enumerate(steps):
        tokens = sum(q_lens)
        q = torch.randn(tokens, heads, DN + R, device=dev).to(torch.bfloat16)
        kv_c = torch.randn(tokens, L, device=dev).to(torch.bfloat16)
        k_pe = torch.randn(tokens, R, device=dev).to(torch.bfloat16)
        step.plan(q_lens, ctx, block_table)                     # host arrays, no device sync
        out = step.run(q, kv_c, k_pe, w, cache)                 # writes the new latents into cache
        ref = expanded_attention(cache, block_table.to(dev), w, q, q_lens, ctx)
        err = ((out.float() - ref).norm() / ref.norm()).item()
        info = step.info
        print(f"step {i}: new tokens {q_lens}, context {ctx}: {info.absorbed_requests} of {info.batch_size} "
              f"requests absorbed; relative error {err:.1e}")
        assert err < 2e-2, err
        ctx = [c + n for c, n in zip(ctx, q_lens)]
    print(f"device={dev.type} heads={heads}: ok")


if __name__ == "__main__":
    main()
