"""FP8 (e4m3) inputs through the Python API on the CPU backend: NumPy (ml_dtypes float8_e4m3fn)
and torch.float8_e4m3fn arrays, the descale factors of RaggedPrefill.run, reference_prefill,
mlakit.torch's ops and flash_attn_varlen_func (FlashAttention-3's q_descale / k_descale /
v_descale), the output dtype, and the errors for unsupported dtype combinations. Each result is
checked against an independent NumPy float64 attention of the dequantized inputs."""

import numpy as np
import pytest

import mlakit
from attn_ref import indptr, numpy_attention, relative_error

ml_dtypes = pytest.importorskip("ml_dtypes")
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
BF16 = np.dtype(ml_dtypes.bfloat16)


def fp8_problem(rng, heads, kv_heads, dqk, dvo, q_lens, kv_lens):
    qo, kv = indptr(q_lens), indptr(kv_lens)
    q = (3 * rng.standard_normal((int(qo[-1]), heads, dqk))).astype(E4M3)
    k = (3 * rng.standard_normal((int(kv[-1]), kv_heads, dqk))).astype(E4M3)
    v = (20 * rng.standard_normal((int(kv[-1]), kv_heads, dvo))).astype(E4M3)
    batch = len(q_lens)
    descales = [np.exp2(rng.uniform(-2, 2, size=(batch + 1, kv_heads))).astype(np.float32) for _ in range(3)]
    return q, k, v, qo, kv, descales


def dequantized(q, k, v, qo, kv, descales):
    """float64 q * qd, k * kd, v * vd per (sequence, kv head), written out here."""
    qd, kd, vd = descales
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    for b in range(len(qo) - 1):
        q64[qo[b]:qo[b + 1]] *= np.repeat(qd[b], group)[None, :, None]
        k64[kv[b]:kv[b + 1]] *= kd[b][None, :, None]
        v64[kv[b]:kv[b + 1]] *= vd[b][None, :, None]
    return q64, k64, v64


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("out_dtype", ["bf16", "fp16"])
def test_numpy_e4m3_with_descales_matches_float64(rng, causal, out_dtype):
    q_lens, kv_lens = [0, 1, 37, 130], [3, 1, 60, 130]
    q, k, v, qo, kv, d = fp8_problem(rng, 4, 2, 192, 128, q_lens, kv_lens)
    attn = mlakit.RaggedPrefill(4, 2, 192, 128, dtype="e4m3", out_dtype=out_dtype, max_batch=4,
                                max_q_tokens=int(qo[-1]), max_kv_tokens=int(kv[-1]))
    assert attn.dtype == "e4m3" and attn.out_dtype == out_dtype
    attn.plan(qo, kv, causal=causal)
    out, lse = attn.run(q, k, v, return_lse=True, q_descale=d[0], k_descale=d[1], v_descale=d[2])
    assert out.dtype == (BF16 if out_dtype == "bf16" else np.float16)
    want, want_lse = numpy_attention(*dequantized(q, k, v, qo, kv, d), qo, kv, causal)
    assert relative_error(out.astype(np.float64), want) <= (1e-2 if out_dtype == "bf16" else 2e-3)
    seen = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[seen], want_lse[seen], rtol=1e-4, atol=1e-4)
    assert np.all(lse[~seen] == -np.inf)
    # The C++ reference with the same descales agrees with the NumPy one.
    ref = mlakit.reference_prefill(q, k, v, qo, kv, causal=causal, q_descale=d[0], k_descale=d[1], v_descale=d[2])
    assert relative_error(ref, want) <= 1e-12
    # Without descales the answer is another one (the factors are not 1).
    plain = attn.run(q, k, v)
    assert relative_error(plain.astype(np.float64), want) > 1e-2


def test_torch_float8_tensors_ops_and_varlen(rng):
    torch = pytest.importorskip("torch")
    import mlakit.torch as mt

    q_lens, kv_lens = [5, 70, 1], [40, 70, 1]
    q, k, v, qo, kv, d = fp8_problem(rng, 4, 4, 192, 128, q_lens, kv_lens)
    want, _ = numpy_attention(*dequantized(q, k, v, qo, kv, d), qo, kv, True)
    tq, tk, tv = (torch.from_numpy(np.asarray(x).view(np.uint8)).view(torch.float8_e4m3fn) for x in (q, k, v))
    tqd, tkd, tvd = (torch.from_numpy(x) for x in d)

    attn = mlakit.RaggedPrefill(4, 4, 192, 128, dtype=torch.float8_e4m3fn, max_batch=3,
                                max_q_tokens=int(qo[-1]), max_kv_tokens=int(kv[-1]))
    attn.plan(qo, kv, causal=True)
    out = attn.run(tq, tk, tv, q_descale=tqd, k_descale=tkd, v_descale=tvd)
    assert out.dtype == torch.bfloat16
    assert relative_error(out.double().numpy(), want) <= 1e-2
    # The C++ fast path without descales allocates bf16 too.
    assert attn.run(tq, tk, tv).dtype == torch.bfloat16

    # The custom-op helpers, eager and through torch.ops.
    got = mt.ragged_prefill(attn, tq, tk, tv, q_descale=tqd, k_descale=tkd, v_descale=tvd)
    assert got.dtype == torch.bfloat16 and relative_error(got.double().numpy(), want) <= 1e-2
    got_op = torch.ops.mlakit.ragged_prefill(tq, tk, tv, attn.handle, tqd, tkd, tvd)
    assert torch.equal(got_op, got)
    o2 = torch.full_like(got, float("nan"))
    mt.ragged_prefill_out(attn, tq, tk, tv, o2, q_descale=tqd, k_descale=tkd, v_descale=tvd)
    assert torch.equal(o2, got)
    o3, lse3 = mt.ragged_prefill(attn, tq, tk, tv, return_lse=True, q_descale=tqd, k_descale=tkd, v_descale=tvd)
    assert torch.equal(o3, got) and lse3.dtype == torch.float32

    # FlashAttention-3's argument names.
    cu_q, cu_k = torch.from_numpy(qo), torch.from_numpy(kv)
    fa = mt.flash_attn_varlen_func(tq, tk, tv, cu_q, cu_k, max(q_lens), max(kv_lens), causal=True,
                                   q_descale=tqd, k_descale=tkd, v_descale=tvd)
    assert fa.dtype == torch.bfloat16 and torch.equal(fa, got)
    # Into a preallocated bf16 out (new offsets tensors: a fresh plan, whose checks see out).
    pre = torch.full_like(got, float("nan"))
    mt.flash_attn_varlen_func(tq, tk, tv, cu_q.clone(), cu_k.clone(), max(q_lens), max(kv_lens), causal=True,
                              q_descale=tqd, k_descale=tkd, v_descale=tvd, out=pre)
    assert torch.equal(pre, got)
    with pytest.raises(TypeError, match="float8_e4m3fn inputs write bfloat16 or float16"):
        mt.flash_attn_varlen_func(tq, tk, tv, cu_q.clone(), cu_k.clone(), max(q_lens), max(kv_lens), causal=True,
                                  out=torch.empty(got.shape, dtype=torch.float32))
    # The traced path (a dispatch mode on the stack) runs the custom op, with the same result.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():
        fa_op = mt.flash_attn_varlen_func(tq, tk, tv, cu_q, cu_k, max(q_lens), max(kv_lens), causal=True,
                                          q_descale=tqd, k_descale=tkd, v_descale=tvd)
    assert torch.equal(fa_op, got)


def test_unsupported_combinations_are_named(rng):
    q, k, v, qo, kv, d = fp8_problem(rng, 2, 2, 64, 64, [9], [9])
    attn = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="e4m3", max_batch=1, max_q_tokens=9, max_kv_tokens=9)
    attn.plan(qo, kv)
    with pytest.raises(TypeError, match=r"k: dtype bf16 differs from q's e4m3 \(q, k and v share one dtype: "
                                        r"bf16, fp16 or e4m3"):
        attn.run(q, k.astype(np.float32).astype(BF16), v)
    with pytest.raises(TypeError, match=r"out: dtype e4m3 is not an output dtype of e4m3 inputs"):
        attn.run(q, k, v, out=np.zeros((9, 2, 64), dtype=E4M3))
    with pytest.raises(ValueError, match=r"q_descale: shape \[0, 2\] must be \[>= batch_size, num_kv_heads\]"):
        attn.run(q, k, v, q_descale=np.ones((0, 2), np.float32))
    with pytest.raises(TypeError, match=r"config.out_dtype: the output of e4m3 inputs must be bf16 or fp16"):
        mlakit.RaggedPrefill(2, 2, 64, 64, dtype="e4m3", out_dtype="fp32", max_batch=1, max_q_tokens=9,
                             max_kv_tokens=9)
    bf = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="bf16", max_batch=1, max_q_tokens=9, max_kv_tokens=9)
    bf.plan(qo, kv)
    qb, kb, vb = (x.astype(np.float32).astype(BF16) for x in (q, k, v))
    with pytest.raises(TypeError, match="descale factors apply to e4m3 inputs only"):
        bf.run(qb, kb, vb, k_descale=np.ones((1, 2), np.float32))


def test_one_shot_and_reference_take_e4m3(rng):
    q, k, v, qo, kv, _ = fp8_problem(rng, 2, 1, 64, 64, [20, 3], [30, 3])
    out = mlakit.ragged_prefill(q, k, v, qo, kv, causal=True)
    assert out.dtype == BF16
    want, _ = numpy_attention(q, k, v, qo, kv, True)
    assert relative_error(out.astype(np.float64), want) <= 1e-2
    ref = mlakit.reference_prefill(q, k, v, qo, kv, causal=True)
    assert relative_error(ref, want) <= 1e-12
