"""Test helpers: a NumPy float64 attention written from the documented semantics (independent
of the C++ reference), random ragged problems, and the error measure the C++ tests use."""

import math

import numpy as np

try:  # bfloat16 for NumPy, optional
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BF16 = None

# Same tolerances as tests/cpu/test_cpu_backend.cc (relative L2 error of the output).
TOL = {"fp16": 2e-3, "bf16": 1e-2}
NP_DTYPE = {"fp16": np.dtype(np.float16), "bf16": BF16}


def dtypes_available():
    return ["fp16"] + (["bf16"] if BF16 is not None else [])


def indptr(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def random_lengths(rng, n, choices):
    return [int(x) for x in rng.choice(choices, size=n)]


def paired_kv_lengths(rng, q_lens, deltas):
    return [max(0, lq + int(rng.choice(deltas))) for lq in q_lens]


def make_problem(rng, dtype, heads, kv_heads, dqk, dvo, q_lens, kv_lens):
    qo, kv = indptr(q_lens), indptr(kv_lens)
    npdt = NP_DTYPE[dtype]
    q = rng.standard_normal((int(qo[-1]), heads, dqk)).astype(npdt)
    k = rng.standard_normal((int(kv[-1]), kv_heads, dqk)).astype(npdt)
    v = rng.standard_normal((int(kv[-1]), kv_heads, dvo)).astype(npdt)
    return q, k, v, qo, kv


def visible_mask(lq, lk, causal, window_left):
    i = np.arange(lq)[:, None]
    j = np.arange(lk)[None, :]
    mask = np.ones((lq, lk), dtype=bool)
    if causal:
        mask &= j <= lk - lq + i
    if window_left is not None and window_left >= 0:
        mask &= j >= lk - lq + i - window_left
    return mask


def numpy_attention(q, k, v, qo, kv, causal=False, sm_scale=None, window_left=-1, soft_cap=0.0):
    """float64 ragged attention; returns (out [Tq, H, Dvo], lse [Tq, H])."""
    q = np.asarray(q).astype(np.float64)
    k = np.asarray(k).astype(np.float64)
    v = np.asarray(v).astype(np.float64)
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    scale = 1.0 / math.sqrt(q.shape[2]) if sm_scale is None else sm_scale
    out = np.zeros((q.shape[0], heads, v.shape[2]))
    lse = np.full((q.shape[0], heads), -np.inf)
    for b in range(len(qo) - 1):
        q0, q1, k0, k1 = int(qo[b]), int(qo[b + 1]), int(kv[b]), int(kv[b + 1])
        lq, lk = q1 - q0, k1 - k0
        if lq == 0:
            continue
        kb = np.repeat(k[k0:k1], group, axis=1)  # q head h reads kv head h // group
        vb = np.repeat(v[k0:k1], group, axis=1)
        s = np.einsum("qhd,khd->hqk", q[q0:q1], kb) * scale
        if soft_cap:
            s = soft_cap * np.tanh(s / soft_cap)
        mask = visible_mask(lq, lk, causal, window_left)
        s = np.where(mask[None], s, -np.inf)
        m = s.max(axis=-1, initial=-np.inf)  # [H, lq]
        seen = np.isfinite(m)
        m_safe = np.where(seen, m, 0.0)
        p = np.exp(s - m_safe[..., None])
        l = p.sum(axis=-1)
        o = np.einsum("hqk,khd->qhd", p / np.where(seen, l, 1.0)[..., None], vb)
        out[q0:q1] = np.where(seen.T[..., None], o, 0.0)
        lse[q0:q1] = np.where(seen, m_safe + np.log(np.where(seen, l, 1.0)), -np.inf).T
    return out, lse


def numpy_merge(out_a, lse_a, out_b, lse_b):
    oa, ob = np.asarray(out_a, np.float64), np.asarray(out_b, np.float64)
    la, lb = np.asarray(lse_a, np.float64), np.asarray(lse_b, np.float64)
    m = np.maximum(la, lb)
    both_empty = np.isneginf(m)
    m_safe = np.where(both_empty, 0.0, m)
    wa, wb = np.exp(la - m_safe), np.exp(lb - m_safe)
    total = wa + wb
    lse = np.where(both_empty, -np.inf, m_safe + np.log(np.where(both_empty, 1.0, total)))
    denom = np.where(both_empty, 1.0, total)[..., None]
    out = (oa * wa[..., None] + ob * wb[..., None]) / denom
    return np.where(both_empty[..., None], 0.0, out), lse


def relative_error(got, want):
    got = np.asarray(got, np.float64).ravel()
    want = np.asarray(want, np.float64).ravel()
    if np.isnan(got).any() or np.isnan(want).any():
        return math.inf
    num = float(np.sum((got - want) ** 2))
    den = float(np.sum(want ** 2))
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return math.sqrt(num / den)


def check_against(out, lse, ref_out, ref_lse, tol):
    """The C++ tests' full comparison: nothing NaN, rows without keys exactly 0 / -inf, output
    relative error <= tol, lse relative error <= 1e-5 over rows that see keys."""
    out = np.asarray(out).astype(np.float64)
    lse = np.asarray(lse).astype(np.float64)
    assert not np.isnan(out).any(), "out has NaN (unwritten) entries"
    empty = np.isneginf(ref_lse)
    assert np.all(np.isneginf(lse[empty])), "rows without keys must have lse = -inf"
    assert np.all(out[empty] == 0.0), "rows without keys must have out = 0"
    assert np.all(np.isfinite(lse[~empty]))
    assert relative_error(lse[~empty], ref_lse[~empty]) <= 1e-5
    err = relative_error(out, ref_out)
    assert err <= tol, f"relative error {err} > {tol}"
    return err
