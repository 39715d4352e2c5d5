"""mlakit.torch custom ops with CPU tensors (runs wherever PyTorch is installed): results vs the
C++ reference, mutation semantics, torch.library.opcheck (schema, fake impls), torch.compile."""

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402
import mlakit.torch as mt  # noqa: E402
from torch_ref import TOL, attention, check, indptr  # noqa: E402


def problem(gen, dtype, heads=4, kv_heads=2, dqk=64, dvo=64, q_lens=(5, 0, 70, 1), kv_lens=(9, 3, 70, 0)):
    qo, kv = indptr(list(q_lens)), indptr(list(kv_lens))
    q = torch.randn(int(qo[-1]), heads, dqk, generator=gen).to(dtype)
    k = torch.randn(int(kv[-1]), kv_heads, dqk, generator=gen).to(dtype)
    v = torch.randn(int(kv[-1]), kv_heads, dvo, generator=gen).to(dtype)
    return q, k, v, qo, kv


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_ops_match_reference_cpu(dtype, gen):
    q, k, v, qo, kv = problem(gen, dtype)
    attn = mlakit.RaggedPrefill(4, 2, 64, 64, dtype=dtype, max_batch=4, max_q_tokens=128, max_kv_tokens=128)
    attn.plan(qo, kv, causal=True)  # torch CPU int32 indptr
    ref_out, ref_lse = attention(q, k, v, qo, kv, causal=True)
    out, lse = mt.ragged_prefill(attn, q, k, v, return_lse=True)
    assert out.dtype == dtype and lse.dtype == torch.float32
    check(out, lse, ref_out, ref_lse, TOL[dtype], lse_atol=1e-4)
    out_h, lse_h = mt.ragged_prefill(attn, q, k, v, return_lse=True, lse_layout="ht")
    assert lse_h.shape == (4, q.shape[0]) and torch.equal(lse_h.T, lse) and torch.equal(out_h, out)
    assert torch.equal(mt.ragged_prefill(attn, q, k, v), out)
    # The C++ float64 reference accepts torch CPU tensors too.
    ref64 = mlakit.reference_prefill(q, k, v, qo, kv, causal=True)
    assert ref64.dtype == torch.float64
    check(out, lse, ref64, ref_lse.double(), TOL[dtype], lse_atol=1e-4)
    # The plain wrapper allocates torch outputs for torch inputs.
    out2 = attn.run(q, k, v)
    assert isinstance(out2, torch.Tensor) and torch.equal(out2, out)


def test_out_op_mutates_out_and_lse(gen):
    q, k, v, qo, kv = problem(gen, torch.float16)
    attn = mlakit.RaggedPrefill(4, 2, 64, 64, dtype="fp16", max_batch=4, max_q_tokens=128, max_kv_tokens=128)
    attn.plan(qo, kv)
    out = torch.full((q.shape[0], 4, 64), float("nan"), dtype=torch.float16)
    lse = torch.full((q.shape[0], 4), float("nan"))
    assert mt.ragged_prefill_out(attn, q, k, v, out, lse) is None
    want_out, want_lse = mt.ragged_prefill(attn, q, k, v, return_lse=True)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    out.fill_(float("nan"))
    mt.ragged_prefill_out(attn, q, k, v, out)  # lse optional
    assert torch.equal(out, want_out)


def test_merge_ops(gen):
    a = torch.randn(9, 2, 32, generator=gen).half()
    b = torch.randn(9, 2, 32, generator=gen).half()
    la, lb = torch.randn(9, 2, generator=gen), torch.randn(9, 2, generator=gen)
    la[0] = -float("inf")
    out, lse = mt.merge_states(a, la, b, lb)
    want_lse = torch.logaddexp(la, lb)
    want = a.float() * torch.exp(la - want_lse)[..., None] + b.float() * torch.exp(lb - want_lse)[..., None]
    torch.testing.assert_close(lse, want_lse)
    torch.testing.assert_close(out.float(), want, atol=2e-3, rtol=2e-3)
    mt.merge_states_(a, la, b, lb)
    assert torch.equal(a, out) and torch.equal(la, lse)


def test_opcheck(gen):
    q, k, v, qo, kv = problem(gen, torch.float16)
    attn = mlakit.RaggedPrefill(4, 2, 64, 64, dtype="fp16", max_batch=4, max_q_tokens=128, max_kv_tokens=128)
    attn.plan(qo, kv, causal=True)
    out = torch.empty(q.shape[0], 4, 64, dtype=torch.float16)
    lse = torch.empty(q.shape[0], 4)
    torch.library.opcheck(torch.ops.mlakit.ragged_prefill.default, (q, k, v, attn.handle))
    torch.library.opcheck(torch.ops.mlakit.ragged_prefill_with_lse.default, (q, k, v, attn.handle))
    torch.library.opcheck(torch.ops.mlakit.ragged_prefill_with_lse.default, (q, k, v, attn.handle, True))
    torch.library.opcheck(torch.ops.mlakit.ragged_prefill_out.default, (q, k, v, out, lse, attn.handle))
    a, la = torch.randn(5, 2, 8).half(), torch.randn(5, 2)
    torch.library.opcheck(torch.ops.mlakit.merge_states.default, (a, la, a.clone(), la.clone()))
    torch.library.opcheck(torch.ops.mlakit.merge_states_.default, (a.clone(), la.clone(), a, la))


def test_torch_compile_cpu(gen):
    q, k, v, qo, kv = problem(gen, torch.float16)
    attn = mlakit.RaggedPrefill(4, 2, 64, 64, dtype="fp16", max_batch=4, max_q_tokens=128, max_kv_tokens=128)
    attn.plan(qo, kv, causal=True)

    def f(q, k, v):
        out, lse = mt.ragged_prefill(attn, q * 0.5, k, v, return_lse=True)
        out2, lse2 = mt.merge_states(out, lse, out, lse)  # merging with itself: same out, lse + log 2
        return out2.float().sum(-1), lse2

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    got, want = compiled(q, k, v), f(q, k, v)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


def test_stale_handle_raises():
    attn = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="fp16", max_batch=1, max_q_tokens=1, max_kv_tokens=1)
    h = attn.handle
    del attn
    import gc

    gc.collect()
    x = torch.zeros(1, 2, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="no live RaggedPrefill"):
        torch.ops.mlakit.ragged_prefill(x, x, x, h)


def test_requires_grad_inputs_are_accepted_forward_only(gen):
    q, k, v, qo, kv = problem(gen, torch.float16)
    attn = mlakit.RaggedPrefill(4, 2, 64, 64, dtype="fp16", max_batch=4, max_q_tokens=128, max_kv_tokens=128)
    attn.plan(qo, kv)
    want = attn.run(q, k, v)
    got = attn.run(q.clone().requires_grad_(), k, v)
    assert torch.equal(got, want)
