"""mlakit.torch.flash_attn_varlen_func and merge_attn_states with CPU tensors (run in CI): the
FlashAttention / vLLM semantics vs a PyTorch float32 reference, capacity-sized buffers, the
[H, T] LSE layout, what is rejected, when it plans, torch.compile and opcheck."""

import math

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402
import mlakit.torch as mt  # noqa: E402
from torch_ref import TOL, attention, check, indptr  # noqa: E402

fa = mt.flash_attn_varlen_func


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(4321)


def inputs(gen, dtype, q_lens, kv_lens, heads=4, kv_heads=2, dqk=64, dvo=32, pad_q=0, pad_kv=0):
    """q/k/v with `pad_*` extra rows of NaN past the batch (a result that read them is NaN)."""
    cq, ck = indptr(q_lens), indptr(kv_lens)
    tq, tk = int(cq[-1]), int(ck[-1])
    q = torch.randn(tq + pad_q, heads, dqk, generator=gen).to(dtype)
    k = torch.randn(tk + pad_kv, kv_heads, dqk, generator=gen).to(dtype)
    v = torch.randn(tk + pad_kv, kv_heads, dvo, generator=gen).to(dtype)
    for t, n in ((q, tq), (k, tk), (v, tk)):
        t[n:] = float("nan")
    return q, k, v, cq, ck


CASES = [  # causal, window_size, softcap, softmax_scale, expected (causal, window_left) in mlakit terms
    (False, (-1, -1), 0.0, None, (False, -1)),
    (True, (-1, -1), 0.0, None, (True, -1)),
    (True, (16, -1), 0.0, 0.3, (True, 16)),
    (False, (7, -1), 0.0, None, (False, 7)),
    (False, (5, 0), 0.0, None, (True, 5)),    # right = 0 is the causal diagonal
    (True, (-1, 0), 4.0, None, (True, -1)),
    (False, (-1, -1), 2.5, 0.1, (False, -1)),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"c{int(c[0])}w{c[1][0]}_{c[1][1]}s{c[2]}")
def test_matches_reference(case, dtype, gen):
    causal, window, softcap, scale, (ref_causal, ref_window) = case
    q, k, v, cq, ck = inputs(gen, dtype, [5, 0, 70, 1, 33], [9, 3, 70, 0, 100])
    out, lse = fa(q, k, v, cq, ck, 70, 100, softmax_scale=scale, causal=causal, window_size=window,
                  softcap=softcap, return_softmax_lse=True)
    assert out.shape == (q.shape[0], 4, 32) and out.dtype == dtype
    assert lse.shape == (4, q.shape[0]) and lse.dtype == torch.float32  # FlashAttention's [H, T]
    ref_out, ref_lse = attention(q, k, v, cq, ck, ref_causal, scale, ref_window, softcap)
    check(out, lse.T, ref_out, ref_lse, TOL[dtype], lse_atol=1e-4)


def test_capacity_sized_buffers(gen):
    """Rows past cu_seqlens[-1] are never read (NaN there) nor written (out= sentinel stays)."""
    q, k, v, cq, ck = inputs(gen, torch.bfloat16, [40, 3], [50, 60], pad_q=25, pad_kv=31)
    tq = int(cq[-1])
    out = torch.full((q.shape[0], 4, 32), 7.0, dtype=torch.bfloat16)
    _, lse = fa(q, k, v, cq, ck, 40, 60, causal=True, out=out, return_softmax_lse=True)
    assert torch.all(out[tq:] == 7.0)
    tight = fa(q[:tq].clone(), k[:110].clone(), v[:110].clone(), cq, ck, 40, 60, causal=True)
    assert torch.equal(out[:tq], tight)
    ref_out, ref_lse = attention(q[:tq], k[:110], v[:110], cq, ck, causal=True)
    check(out[:tq], lse[:, :tq].T, ref_out, ref_lse, TOL[torch.bfloat16], lse_atol=1e-4)


def test_return_conventions(gen):
    q, k, v, cq, ck = inputs(gen, torch.float16, [6, 9], [6, 20])
    plain = fa(q, k, v, cq, ck, 9, 20, causal=True)
    assert isinstance(plain, torch.Tensor)
    out, lse = fa(q, k, v, cq, ck, 9, 20, causal=True, return_softmax_lse=True)
    assert torch.equal(out, plain)
    # flash-attn 2's way to get the LSE: (out, softmax_lse, S_dmask); the probabilities are
    # never materialized, so S_dmask is None.
    out3, lse3, probs = fa(q, k, v, cq, ck, 9, 20, causal=True, return_attn_probs=True)
    assert probs is None and torch.equal(out3, plain) and torch.equal(lse3, lse)
    into = torch.empty_like(plain)
    got, lse4 = fa(q, k, v, cq, ck, 9, 20, causal=True, out=into, return_softmax_lse=True)
    assert got is into and torch.equal(into, plain) and torch.equal(lse4, lse)
    # int64 offsets and host copies given as lists work too.
    got = fa(q, k, v, cq.long(), ck.long(), 9, 20, causal=True, cu_seqlens_q_cpu=cq.tolist(),
             cu_seqlens_k_cpu=ck.tolist())
    assert torch.equal(got, plain)


@pytest.mark.parametrize("kwargs,match", [
    (dict(dropout_p=0.1), r"^mlakit: dropout_p: dropout \(0.1\) \(not supported"),
    (dict(alibi_slopes=torch.ones(4)), r"^mlakit: alibi_slopes: ALiBi \(not supported"),
    (dict(block_table=torch.zeros(2, 1, dtype=torch.int32)), r"^mlakit: block_table: a paged KV cache"),
    (dict(window_size=(4, 3)), r"^mlakit: window_size: a right window \(window_size\[1\] = 3 > 0\)"),
    (dict(window_size=(4,)), r"^mlakit: window_size: must be a \(left, right\) pair"),
    (dict(softcap=-1.0), r"^mlakit: softcap: must be >= 0"),
    (dict(softmax_scale=0.0), r"^mlakit: softmax_scale: must be > 0"),
])
def test_unsupported_is_rejected_and_writes_nothing(kwargs, match, gen):
    q, k, v, cq, ck = inputs(gen, torch.bfloat16, [6, 9], [6, 20])
    out = torch.full((q.shape[0], 4, 32), 3.0, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=match):
        fa(q, k, v, cq, ck, 9, 20, out=out, **kwargs)
    assert torch.all(out == 3.0)


def test_bad_tensors_are_named(gen):
    q, k, v, cq, ck = inputs(gen, torch.bfloat16, [6, 9], [6, 20])
    with pytest.raises(TypeError, match=r"^mlakit: q: dtype torch.float32 is not supported"):
        fa(q.float(), k.float(), v.float(), cq, ck, 9, 20)
    with pytest.raises(ValueError, match=r"^mlakit: cu_seqlens_k: has 2 entries but cu_seqlens_q has 3"):
        fa(q, k, v, cq, ck[:2], 9, 20)
    mlakit._varlen._plans.clear()  # no plan from an earlier test: the check must not depend on one
    with pytest.raises(ValueError, match=r"^mlakit: q: has 14 rows, fewer than the 15 tokens cu_seqlens_q totals"):
        fa(q[:14], k, v, cq, ck, 9, 20)
    with pytest.raises(ValueError, match=r"^mlakit: v: has 25 rows, fewer than the 26 tokens cu_seqlens_k totals"):
        fa(q, k, v[:25], cq, ck, 9, 20)
    with pytest.raises(ValueError, match=r"^mlakit: cu_seqlens_q: must have batch_size \+ 1 >= 1 entries"):
        fa(q, k, v, cq[:0], ck[:0], 9, 20)
    # A causal window to the right would need a right window: fine with causal (FA ignores it).
    assert fa(q, k, v, cq, ck, 9, 20, causal=True, window_size=(3, 2)).shape == (15, 4, 32)


def test_plans_only_when_the_lengths_change(gen, monkeypatch):
    calls = []
    real = mlakit.RaggedPrefill.plan

    def spy(self, *args, **kwargs):
        calls.append(args)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(mlakit.RaggedPrefill, "plan", spy)
    q, k, v, cq, ck = inputs(gen, torch.float16, [6, 9, 4], [6, 20, 4], heads=2, kv_heads=2, dvo=16)
    first = fa(q, k, v, cq, ck, 9, 20, window_size=(3, -1))
    assert len(calls) == 1
    for _ in range(3):  # every layer of a forward pass: same lengths, new offset tensors
        assert torch.equal(fa(q, k, v, cq.clone(), ck.clone(), 9, 20, window_size=(3, -1)), first)
    assert len(calls) == 1
    other = fa(q, k, v, indptr([9, 6, 4]), ck, 9, 20, window_size=(3, -1))  # new lengths: one plan
    assert len(calls) == 2
    ref, _ = attention(q, k, v, indptr([9, 6, 4]), ck, window_left=3)
    check(other, torch.zeros(19, 2), ref, torch.zeros(19, 2), TOL[torch.float16])
    assert torch.equal(fa(q, k, v, cq, ck, 9, 20, window_size=(3, -1)), first)  # back: plans again
    assert len(calls) == 3
    fa(q, k, v, cq, ck, 9, 20, window_size=(3, -1), causal=True)  # other options: their own plan
    fa(q, k, v, cq, ck, 9, 20, window_size=(3, -1), causal=True)
    assert len(calls) == 4


def test_torch_compile(gen):
    q, k, v, cq, ck = inputs(gen, torch.bfloat16, [12, 1, 30], [40, 1, 30])

    def f(q, k, v, cq, ck):
        out, lse = fa(q * 0.5, k, v, cq, ck, 30, 40, causal=True, window_size=(8, -1), return_softmax_lse=True)
        out2 = torch.empty_like(out)
        mt.merge_attn_states(out2, out, lse, out, lse)  # with itself: same out, lse + log 2
        return out2.float().sum(-1), lse

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    got, want = compiled(q, k, v, cq, ck), f(q, k, v, cq, ck)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    # Other lengths through the same compiled graph (the offsets are inputs, not constants).
    cq2, ck2 = indptr([20, 13, 10]), indptr([20, 13, 38])
    got, want = compiled(q, k, v, cq2, ck2), f(q, k, v, cq2, ck2)
    torch.testing.assert_close(got[0], want[0])
    ref_out, _ = attention(q * 0.5, k, v, cq2, ck2, True, None, 8)
    torch.testing.assert_close(got[0], ref_out.float().sum(-1), atol=0.15, rtol=0.02)


def test_torch_compile_inductor(gen):
    q, k, v, cq, ck = inputs(gen, torch.float16, [7, 25], [7, 25])
    f = lambda q, k, v: fa(q, k, v, cq, ck, 25, 25, causal=True).float() * 2.0 + 1.0  # noqa: E731
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(q, k, v), f(q, k, v))


def test_opcheck(gen):
    q, k, v, cq, ck = inputs(gen, torch.float16, [6, 9], [6, 20])
    args = (q, k, v, cq, ck, None, None, 0.0, True, -1, 0.0)
    torch.library.opcheck(torch.ops.mlakit.flash_attn_varlen.default, args)
    torch.library.opcheck(torch.ops.mlakit.flash_attn_varlen_with_lse.default, args)
    out, lse = torch.empty(15, 4, 32, dtype=torch.float16), torch.empty(4, 15)
    torch.library.opcheck(torch.ops.mlakit.flash_attn_varlen_out.default, args + (out, lse))
    o, lse_ht = torch.randn(9, 3, 8).half(), torch.randn(3, 9)
    torch.library.opcheck(torch.ops.mlakit.merge_attn_states.default,
                          (torch.empty_like(o), o, lse_ht, o.clone(), lse_ht.clone(), torch.empty(3, 9)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_merge_attn_states_vllm_layout(dtype, gen):
    n, h, d = 21, 3, 16
    p, s = torch.randn(n, h, d, generator=gen).to(dtype), torch.randn(n, h, d, generator=gen).to(dtype)
    p_lse, s_lse = torch.randn(h, n, generator=gen) * 3, torch.randn(h, n, generator=gen) * 3  # [H, T]
    p_lse[:, 0] = -math.inf        # prefix empty (mlakit / FlashAttention-3)
    s_lse[:, 1] = math.inf         # suffix empty as FlashAttention-2 writes it
    p_lse[:, 2] = s_lse[:, 2] = -math.inf
    out, out_lse = torch.full_like(p, 9.0), torch.full((h, n), 9.0)
    assert mt.merge_attn_states(out, p, p_lse, s, s_lse, out_lse) is None
    pl = torch.where(torch.isinf(p_lse), -math.inf, p_lse)
    sl = torch.where(torch.isinf(s_lse), -math.inf, s_lse)
    want_lse = torch.logaddexp(pl, sl)
    fin = torch.isfinite(want_lse)
    torch.testing.assert_close(out_lse[fin], want_lse[fin])
    assert torch.isneginf(out_lse[:, 2]).all()
    m = torch.where(fin, want_lse, 0.0)
    want = (p.float() * torch.exp(pl - m).T[..., None] + s.float() * torch.exp(sl - m).T[..., None])
    want[2] = 0.0
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out.float(), want, atol=tol, rtol=tol)
    assert torch.equal(out[0], s[0]) and torch.equal(out[1], p[1])  # empty side passes the other through
    out2 = torch.empty_like(out)
    mt.merge_attn_states(out2, p, p_lse, s, s_lse)  # output_lse optional
    assert torch.equal(out2, out)
