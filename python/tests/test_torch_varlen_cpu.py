"""mlakit.torch.flash_attn_varlen_func and merge_attn_states with CPU tensors (run in CI): the
FlashAttention / vLLM semantics vs a PyTorch float32 reference, capacity-sized buffers, the
[H, T] LSE layout, flash-attn 2's conventions (right windows past max_seqlen_k, S_dmask, inputs
that require grad), what is rejected and in whose words, when it plans, torch.compile and
opcheck."""

import math
import re

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
    # flash-attn 2's way to get the LSE: (out, softmax_lse, S_dmask); without dropout flash-attn 2
    # returns S_dmask as an empty tensor of q's dtype and device, and so does mlakit.
    out3, lse3, probs = fa(q, k, v, cq, ck, 9, 20, causal=True, return_attn_probs=True)
    assert isinstance(probs, torch.Tensor) and probs.shape == (0,)
    assert probs.dtype == q.dtype and probs.device == q.device
    assert torch.equal(out3, plain) and torch.equal(lse3, lse)
    out4, lse4, probs4 = fa(q, k, v, cq, ck, 9, 20, causal=True, return_attn_probs=True, return_softmax_lse=True)
    assert torch.equal(out4, plain) and torch.equal(lse4, lse) and probs4.shape == (0,)
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
    (dict(window_size=(4, 3)),
     r"^mlakit: window_size: a right window \(window_size\[1\] = 3 > 0, below max_seqlen_k = 20\)"),
    (dict(window_size=(4, 19)), r"^mlakit: window_size: a right window \(window_size\[1\] = 19 > 0"),
    (dict(window_size=(4,)), r"^mlakit: window_size: must be a \(left, right\) pair"),
    (dict(softcap=-1.0), r"^mlakit: softcap: must be >= 0"),
    (dict(softcap=math.inf), r"^mlakit: softcap: must be finite and >= 0 \(0 = off\), got inf$"),
    (dict(softmax_scale=0.0), r"^mlakit: softmax_scale: must be > 0"),
    (dict(softmax_scale=math.inf), r"^mlakit: softmax_scale: must be a positive finite number or None \(None means "
                                   r"1/sqrt\(q's head dim\)\), got inf$"),
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


# Names of the plan underneath (config fields, RaggedPrefill.plan's and merge_states' arguments)
# that a caller of the FlashAttention / vLLM drop-ins never wrote.
INTERNAL = re.compile(r"qo_indptr|kv_indptr|config\.|options\.|num_qo_heads|num_kv_heads|head_dim_qk|head_dim_vo|"
                      r"sm_scale|logits_soft_cap|lse_a|lse_b|out_a|out_b|lse_out|DLPack")


def test_errors_name_the_callers_arguments(gen):
    q, k, v, cq, ck = inputs(gen, torch.bfloat16, [6, 9], [6, 20])
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    q3 = torch.randn(15, 3, 64).bfloat16()
    cases = [
        (dict(q=q3), ValueError, r"^mlakit: q: has 3 heads, not a multiple of k's 2 \(grouped-query attention"),
        (dict(cu_seqlens_q=i32(0, 9, 6)), ValueError,
         r"^mlakit: cu_seqlens_q: must be non-decreasing, but cu_seqlens_q\[2\] = 6 < cu_seqlens_q\[1\] = 9$"),
        (dict(cu_seqlens_k=i32(0, 21, 20)), ValueError,
         r"^mlakit: cu_seqlens_k: must be non-decreasing, but cu_seqlens_k\[2\] = 20 < cu_seqlens_k\[1\] = 21$"),
        (dict(cu_seqlens_q=i32(1, 6, 15)), ValueError, r"^mlakit: cu_seqlens_q: cu_seqlens_q\[0\] must be 0, got 1$"),
        (dict(cu_seqlens_q_cpu=[0, 9, 6], cu_seqlens_k_cpu=[0, 6, 26]), ValueError,
         r"^mlakit: cu_seqlens_q_cpu: must be non-decreasing, but cu_seqlens_q_cpu\[2\] = 6"),
        (dict(v=v[:, :1]), ValueError, r"^mlakit: v: has 1 heads but k has 2$"),
        (dict(k=k[..., :32]), ValueError, r"^mlakit: k: head dim 32 differs from q's 64$"),
        (dict(q=torch.zeros(15, 4, 600).bfloat16(), k=torch.zeros(26, 2, 600).bfloat16()), ValueError,
         r"^mlakit: q: head dim 600 \(v's 32\): the CPU backend supports head dims 1\.\.512$"),
        (dict(out=torch.empty(15, 4, 16).bfloat16()), ValueError,
         r"^mlakit: out: shape \[15, 4, 16\] must be \[rows, 4, 32\] \(q's heads, v's head dim\)$"),
        (dict(out=torch.empty(15, 4, 32).half()), TypeError,
         r"^mlakit: out: dtype torch.float16 differs from q's torch.bfloat16$"),
        (dict(out=torch.empty(14, 4, 32).bfloat16()), ValueError,
         r"^mlakit: out: has 14 rows, fewer than the 15 tokens cu_seqlens_q totals$"),
        (dict(k=k.half(), v=v.half()), TypeError, r"^mlakit: k: dtype torch.float16 differs from q's torch.bfloat16$"),
        (dict(q=q.to("meta")), TypeError, r"^mlakit: q: is on device 'meta'; mlakit runs on cpu and cuda tensors$"),
        (dict(k=k.to("meta")), TypeError, r"^mlakit: k: is on device 'meta'; mlakit runs on cpu and cuda tensors$"),
        (dict(cu_seqlens_k=ck.to("meta")), TypeError,
         r"^mlakit: cu_seqlens_k: is on device 'meta'; mlakit runs on cpu and cuda tensors$"),
    ]
    # With no plan yet (the checks before planning), then with one for these shapes in force (the
    # launch's own checks, told in the same words).
    for planned in (False, True):
        mlakit._varlen._plans.clear()
        if planned:
            fa(q, k, v, cq, ck, 9, 20)
        for change, kind, match in cases:
            args = dict(q=q, k=k, v=v, cu_seqlens_q=cq, cu_seqlens_k=ck)
            args.update(change)
            kw = {n: args.pop(n) for n in ("out", "cu_seqlens_q_cpu", "cu_seqlens_k_cpu") if n in args}
            with pytest.raises(kind, match=match) as e:
                fa(args["q"], args["k"], args["v"], args["cu_seqlens_q"], args["cu_seqlens_k"], 9, 20, **kw)
            assert not INTERNAL.search(str(e.value)), str(e.value)


def test_right_window_at_or_past_max_seqlen_k_is_no_right_limit(gen):
    """flash-attn 2 sets a right window >= max_seqlen_k to -1 (it reaches past every key): the
    same result as no right limit, with or without a left window."""
    q, k, v, cq, ck = inputs(gen, torch.bfloat16, [5, 0, 70, 1, 33], [9, 3, 70, 0, 100])
    for left in (-1, 16):
        want, want_lse = fa(q, k, v, cq, ck, 70, 100, window_size=(left, -1), return_softmax_lse=True)
        for right in (100, 101, 1 << 20):
            got, lse = fa(q, k, v, cq, ck, 70, 100, window_size=(left, right), return_softmax_lse=True)
            assert torch.equal(got, want) and torch.equal(lse, want_lse)
    ref_out, ref_lse = attention(q, k, v, cq, ck, False, None, 16)
    check(got, lse.T, ref_out, ref_lse, TOL[torch.bfloat16], lse_atol=1e-4)
    # The rule reads max_seqlen_k as given (as flash-attn does): 99 is a right window for 100 keys.
    with pytest.raises(ValueError, match=r"^mlakit: window_size: a right window \(window_size\[1\] = 99 > 0, "
                                         r"below max_seqlen_k = 100\)"):
        fa(q, k, v, cq, ck, 70, 100, window_size=(16, 99))
    assert torch.equal(fa(q, k, v, cq, ck, 70, 99, window_size=(16, 99)), got)
    with pytest.raises(ValueError, match=r"^mlakit: max_seqlen_k: must be an int \(a right window is compared"):
        fa(q, k, v, cq, ck, 70, None, window_size=(16, 200))
    # With causal the right side is the diagonal whatever it says (flash-attn sets it to 0).
    causal = fa(q, k, v, cq, ck, 70, 100, causal=True)
    assert torch.equal(fa(q, k, v, cq, ck, 70, 100, causal=True, window_size=(-1, 500)), causal)


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_inputs_requiring_grad_are_refused_while_grad_is_enabled(which, gen):
    """Forward only: an output without a graph would lose the gradients silently, so the call is
    refused (writing nothing) unless grad is off, as it is in engines."""
    q, k, v, cq, ck = inputs(gen, torch.bfloat16, [6, 9], [6, 20])
    want = fa(q, k, v, cq, ck, 9, 20, causal=True)
    t = dict(q=q, k=k, v=v)
    t[which] = t[which].clone().requires_grad_()
    out = torch.full_like(want, 3.0)
    with pytest.raises(RuntimeError, match=rf"^mlakit: {which}: requires grad while grad is enabled, and "
                                           r"mlakit.torch.flash_attn_varlen_func is forward-only"):
        fa(t["q"], t["k"], t["v"], cq, ck, 9, 20, causal=True, out=out)
    assert torch.all(out == 3.0)
    with torch.no_grad():
        assert torch.equal(fa(t["q"], t["k"], t["v"], cq, ck, 9, 20, causal=True), want)
    with torch.inference_mode():
        assert torch.equal(fa(t["q"], t["k"], t["v"], cq, ck, 9, 20, causal=True), want)
    assert torch.equal(fa(t["q"].detach(), t["k"].detach(), t["v"].detach(), cq, ck, 9, 20, causal=True), want)


def test_merge_errors_name_the_arguments_and_the_layout(gen):
    n, h, d = 20, 4, 16
    o = torch.randn(n, h, d, generator=gen)
    ht, th = torch.randn(h, n, generator=gen), torch.randn(n, h, generator=gen)
    out = torch.full_like(o, 5.0)
    ht_words = r"must be \[H, T\] \(heads first: vLLM's and FlashAttention's layout\) = \[4, 20\]"
    for args, name in (((out, o, th, o, ht), "prefix_lse"), ((out, o, ht, o, th), "suffix_lse"),
                       ((out, o, ht, o, ht, torch.empty(n, h)), "output_lse")):
        with pytest.raises(ValueError, match=rf"^mlakit: {name}: shape \[20, 4\] {ht_words}, for prefix_output"):
            mt.merge_attn_states(*args)
    with pytest.raises(TypeError, match=r"^mlakit: suffix_output: dtype fp16 differs from prefix_output's fp32$"):
        mt.merge_attn_states(out, o, ht, o.half(), ht)
    with pytest.raises(ValueError, match=r"^mlakit: output: shape \[5, 4, 16\] differs from prefix_output's"):
        mt.merge_attn_states(out[:5], o, ht, o, ht)
    with pytest.raises(TypeError, match=r"^mlakit: suffix_lse: is on device 'meta'"):
        mt.merge_attn_states(out, o, ht, o, ht.to("meta"))
    assert torch.all(out == 5.0)
    # merge_states takes [N, H]: an [H, N] LSE is told so, in every entry point.
    th_words = r"must be \[N, H\] \(tokens first; an \[H, N\] array such as FlashAttention's LSE passes as its \.T\)"
    for f in (mt.merge_states, mt.merge_states_, mlakit.merge_states):
        with pytest.raises(ValueError, match=rf"^mlakit: lse_b: shape \[4, 20\] {th_words} = \[20, 4\], for out_a"):
            f(o, th, o, ht)
    with pytest.raises(ValueError, match=rf"^mlakit: lse_a: shape \[4, 20\] {th_words}"):
        mlakit.merge_states(o.numpy(), ht.numpy(), o.numpy(), th.numpy())
    with pytest.raises(ValueError, match=rf"^mlakit: lse_out: shape \[4, 20\] {th_words}"):
        mlakit.merge_states(o, th, o, th, lse_out=torch.empty(h, n))


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
