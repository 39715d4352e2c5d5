"""PyTorch float32 reference for the GPU/torch tests (independent of mlakit)."""

import math

import torch


def random_ragged(gen, batch, max_len, device, min_len=0):
    q_lens = torch.randint(min_len, max_len + 1, (batch,), generator=gen).tolist()
    # kv: the q tokens plus a random prefix (lq <= lk), sometimes shorter (rows without keys).
    extra = torch.randint(-8, max_len + 1, (batch,), generator=gen).tolist()
    kv_lens = [max(0, a + b) for a, b in zip(q_lens, extra)]
    return q_lens, kv_lens


def indptr(lengths):
    t = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    t[1:] = torch.tensor(lengths, dtype=torch.int32).cumsum(0)
    return t


def attention(q, k, v, qo, kv, causal=False, sm_scale=None, window_left=-1, soft_cap=0.0):
    """float32 ragged attention -> (out [Tq, H, Dvo] fp32, lse [Tq, H] fp32)."""
    q, k, v = q.float(), k.float(), v.float()
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    scale = 1.0 / math.sqrt(q.shape[2]) if sm_scale is None else sm_scale
    out = torch.zeros(q.shape[0], heads, v.shape[2], device=q.device)
    lse = torch.full((q.shape[0], heads), -math.inf, device=q.device)
    qo, kv = qo.tolist(), kv.tolist()
    for b in range(len(qo) - 1):
        q0, q1, k0, k1 = qo[b], qo[b + 1], kv[b], kv[b + 1]
        lq, lk = q1 - q0, k1 - k0
        if lq == 0:
            continue
        kb = k[k0:k1].repeat_interleave(group, dim=1)
        vb = v[k0:k1].repeat_interleave(group, dim=1)
        s = torch.einsum("qhd,khd->hqk", q[q0:q1], kb) * scale
        if soft_cap:
            s = soft_cap * torch.tanh(s / soft_cap)
        i = torch.arange(lq, device=q.device)[:, None]
        j = torch.arange(lk, device=q.device)[None, :]
        mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device)
        if causal:
            mask &= j <= lk - lq + i
        if window_left >= 0:
            mask &= j >= lk - lq + i - window_left
        s = s.masked_fill(~mask, -math.inf)
        row_lse = torch.logsumexp(s, dim=-1)  # -inf for rows without keys
        seen = torch.isfinite(row_lse)
        p = torch.exp(s - torch.where(seen, row_lse, 0.0)[..., None])
        o = torch.einsum("hqk,khd->qhd", p, vb)
        out[q0:q1] = torch.where(seen.T[..., None], o, 0.0)
        lse[q0:q1] = row_lse.T
    return out, lse


def relative_error(got, want):
    got, want = got.double().flatten(), want.double().flatten()
    if torch.isnan(got).any():
        return math.inf
    den = want.pow(2).sum().item()
    num = (got - want).pow(2).sum().item()
    return math.sqrt(num / den) if den > 0 else (0.0 if num == 0 else math.inf)


def check(out, lse, ref_out, ref_lse, tol, lse_atol=2e-2):
    """Like tests/gpu: nothing NaN, rows without keys exactly 0 / -inf, output relative L2 error
    <= tol, lse max abs error <= lse_atol (the CUDA kernels use exp2 approximations)."""
    assert not torch.isnan(out).any()
    empty = torch.isneginf(ref_lse)
    assert torch.isneginf(lse[empty]).all()
    assert (out.float()[empty] == 0).all()
    assert torch.isfinite(lse[~empty]).all()
    if (~empty).any():
        assert (lse[~empty].double() - ref_lse[~empty].double()).abs().max().item() <= lse_atol
    err = relative_error(out, ref_out)
    assert err <= tol, f"relative error {err} > {tol}"
    return err


TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
