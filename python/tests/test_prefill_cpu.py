"""RaggedPrefill on the CPU backend through the Python API, with NumPy arrays: the same checks as
tests/cpu/test_cpu_backend.cc (vs the C++ float64 reference), plus an independent NumPy float64
attention, the allocation/stream conveniences and re-planning."""

import math

import numpy as np
import pytest

import mlakit
from attn_ref import (TOL, check_against, dtypes_available, make_problem, numpy_attention,
                      paired_kv_lengths, random_lengths, relative_error, visible_mask)

# (name, heads, kv_heads, dqk, dvo, causal, window_left, soft_cap, sm_scale), as in the C++ suite.
CASES = [
    ("mla_causal", 4, 4, 192, 128, True, -1, 0.0, None),
    ("mla_noncausal_gqa", 4, 1, 192, 128, False, -1, 0.0, None),
    ("d128_causal_gqa_window", 8, 2, 128, 128, True, 37, 0.0, None),
    ("d64_noncausal_window", 2, 2, 64, 64, False, 20, 0.0, None),
    ("d64_softcap_scale", 4, 2, 64, 64, True, -1, 3.0, 0.2),
    ("mla_softcap", 2, 1, 192, 128, True, 70, 20.0, None),
]


def ragged_lengths(rng):
    # 0, 1, odd, and lengths that cross the 64-row tile edge (63/64/65, > 128).
    q_lens = random_lengths(rng, 5, [0, 1, 3, 31, 63, 64, 65, 129, 150])
    q_lens[0], q_lens[1] = 150, 1
    # kv = q + delta: prefix context (lq < lk) and q longer than kv (rows with no key when causal).
    return q_lens, paired_kv_lengths(rng, q_lens, [-20, 0, 0, 7, 90])


def poisoned(shape, dtype):
    return np.full(shape, np.nan, dtype=dtype)  # any entry left unwritten stays NaN


@pytest.mark.parametrize("dtype", dtypes_available())
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_references(case, dtype, rng):
    _, heads, kv_heads, dqk, dvo, causal, window, cap, scale = case
    q_lens, kv_lens = ragged_lengths(rng)
    q, k, v, qo, kv = make_problem(rng, dtype, heads, kv_heads, dqk, dvo, q_lens, kv_lens)
    attn = mlakit.RaggedPrefill(heads, kv_heads, dqk, dvo, dtype=dtype, max_batch=len(q_lens),
                                max_q_tokens=int(qo[-1]), max_kv_tokens=int(kv[-1]))
    opts = dict(causal=causal, sm_scale=scale, window_left=window, logits_soft_cap=cap or None)
    attn.plan(qo, kv, **opts)

    out = poisoned((q.shape[0], heads, dvo), q.dtype)
    lse = poisoned((q.shape[0], heads), np.float32)
    got = attn.run(q, k, v, out=out, lse=lse)
    assert got is out

    ref_out, ref_lse = mlakit.reference_prefill(q, k, v, qo, kv, return_lse=True, **opts)
    assert ref_out.dtype == np.float64 and ref_lse.dtype == np.float64
    check_against(out, lse, ref_out, ref_lse, TOL[dtype])

    np_out, np_lse = numpy_attention(q, k, v, qo, kv, causal, scale, window, cap)
    check_against(out, lse, np_out, np_lse, TOL[dtype])

    # Deterministic: a second run is bitwise identical.
    out2, lse2 = attn.run(q, k, v, return_lse=True)
    assert out2.tobytes() == out.tobytes() and lse2.tobytes() == lse.tobytes()


def test_cpp_reference_equals_numpy_reference(rng):
    # float64 inputs: both references compute the same sums, so they agree to rounding.
    q_lens, kv_lens = [5, 0, 70, 1], [9, 3, 70, 0]
    qo, kv = np.cumsum([0] + q_lens), np.cumsum([0] + kv_lens)
    q = rng.standard_normal((qo[-1], 4, 64))
    k = rng.standard_normal((kv[-1], 2, 64))
    v = rng.standard_normal((kv[-1], 2, 32))
    for opts in [dict(causal=True), dict(window_left=3), dict(causal=True, logits_soft_cap=2.0, sm_scale=0.5)]:
        out, lse = mlakit.reference_prefill(q, k, v, qo, kv, return_lse=True, **opts)
        want_out, want_lse = numpy_attention(q, k, v, qo, kv, opts.get("causal", False),
                                             opts.get("sm_scale"), opts.get("window_left", -1),
                                             opts.get("logits_soft_cap", 0.0))
        np.testing.assert_allclose(out, want_out, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want_lse))
        fin = np.isfinite(want_lse)
        np.testing.assert_allclose(lse[fin], want_lse[fin], rtol=1e-12)


def test_plan_info_counts_visible_pairs(rng):
    q_lens, kv_lens = [7, 130, 0, 1, 33], [20, 130, 4, 0, 10]
    qo, kv = np.cumsum([0] + q_lens), np.cumsum([0] + kv_lens)
    attn = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="fp16", max_batch=8, max_q_tokens=1000, max_kv_tokens=1000)
    for causal, window in [(False, -1), (True, -1), (True, 5), (False, 8)]:
        attn.plan(qo, kv, causal=causal, window_left=window)
        info = attn.info
        assert (info.batch_size, info.total_q, info.total_kv) == (5, sum(q_lens), sum(kv_lens))
        want = sum(int(visible_mask(a, b, causal, window).sum()) for a, b in zip(q_lens, kv_lens))
        assert info.visible_pairs == want
        assert attn.causal == causal and attn.window_left == window and attn.planned


def test_allocates_outputs_with_callers_library(rng):
    q, k, v, qo, kv = make_problem(rng, "fp16", 4, 2, 64, 32, [3, 17], [3, 40])
    attn = mlakit.RaggedPrefill(4, 2, 64, 32, dtype=np.float16)
    attn.plan(qo, kv, causal=True)
    out = attn.run(q, k, v)
    assert isinstance(out, np.ndarray) and out.dtype == np.float16 and out.shape == (20, 4, 32)
    out2, lse = attn.run(q, k, v, return_lse=True)
    assert lse.dtype == np.float32 and lse.shape == (20, 4)
    assert out2.tobytes() == out.tobytes()
    # lse given but not requested: written, and only out is returned.
    lse3 = poisoned((20, 4), np.float32)
    ret = attn.run(q, k, v, lse=lse3)
    assert isinstance(ret, np.ndarray) and ret.shape == (20, 4, 32)
    np.testing.assert_array_equal(lse3, lse)


@pytest.mark.parametrize("form", ["list", "tuple", "int32", "int64", "strided"])
def test_indptr_forms(form, rng):
    q_lens, kv_lens = [3, 0, 9], [5, 2, 9]
    q, k, v, qo, kv = make_problem(rng, "fp16", 2, 2, 64, 64, q_lens, kv_lens)
    conv = {
        "list": lambda a: [int(x) for x in a],
        "tuple": lambda a: tuple(int(x) for x in a),
        "int32": lambda a: np.asarray(a, np.int32),
        "int64": lambda a: np.asarray(a, np.int64),
        "strided": lambda a: np.repeat(np.asarray(a, np.int32), 2)[::2],
    }[form]
    attn = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="fp16", max_batch=3, max_q_tokens=12, max_kv_tokens=16)
    attn.plan(conv(qo), conv(kv), causal=True)
    ref = numpy_attention(q, k, v, qo, kv, causal=True)[0]
    assert relative_error(attn.run(q, k, v), ref) <= TOL["fp16"]


def test_replan_new_lengths_and_options(rng):
    attn = mlakit.RaggedPrefill(4, 2, 128, 128, dtype="fp16", max_batch=6, max_q_tokens=400, max_kv_tokens=600)
    first = make_problem(rng, "fp16", 4, 2, 128, 128, [100, 1, 65], [200, 1, 65])
    second = make_problem(rng, "fp16", 4, 2, 128, 128, [0, 131, 7, 7, 2, 1], [10, 131, 50, 0, 2, 300])
    for (q, k, v, qo, kv), opts in [(first, dict(causal=True)), (second, dict(window_left=9)),
                                    (first, dict(causal=True, logits_soft_cap=5.0))]:
        attn.plan(qo, kv, **opts)
        out, lse = attn.run(q, k, v, return_lse=True)
        want = mlakit.reference_prefill(q, k, v, qo, kv, return_lse=True, **opts)
        check_against(out, lse, *want, TOL["fp16"])


def test_rejected_plan_keeps_previous_plan(rng):
    q, k, v, qo, kv = make_problem(rng, "fp16", 2, 1, 64, 64, [10, 20], [30, 20])
    attn = mlakit.RaggedPrefill(2, 1, 64, 64, dtype="fp16", max_batch=2, max_q_tokens=30, max_kv_tokens=50)
    attn.plan(qo, kv, causal=True)
    before = attn.run(q, k, v)
    with pytest.raises(ValueError, match="qo_indptr"):
        attn.plan([0, 5, 4], [0, 5, 10], causal=False)
    with pytest.raises(ValueError, match="max_q_tokens"):
        attn.plan([0, 500], [0, 5])
    assert attn.causal and attn.info.total_q == 30
    assert attn.run(q, k, v).tobytes() == before.tobytes()


def test_strided_views_of_fused_buffers(rng):
    # k and v as slices of one latent-expanded buffer [T, Hkv, 192 + 128]; q as a head-slice of a
    # wider buffer. Last dimension contiguous, other strides free, no copies.
    q_lens, kv_lens = [40, 3], [64, 90]
    tq, tk = sum(q_lens), sum(kv_lens)
    qo, kv = np.cumsum([0] + q_lens), np.cumsum([0] + kv_lens)
    q_buf = rng.standard_normal((tq, 6, 192)).astype(np.float16)
    kv_buf = rng.standard_normal((tk, 2, 192 + 128)).astype(np.float16)
    q, k, v = q_buf[:, 1:5], kv_buf[:, :, :192], kv_buf[:, :, 192:]
    assert not (q.flags.c_contiguous or k.flags.c_contiguous or v.flags.c_contiguous)
    attn = mlakit.RaggedPrefill(4, 2, 192, 128, dtype="fp16", max_batch=2, max_q_tokens=tq, max_kv_tokens=tk)
    attn.plan(qo, kv, causal=True)
    out_buf = np.zeros((tq, 4, 256), np.float16)
    out = out_buf[:, :, 64:192]  # strided output too
    attn.run(q, k, v, out=out)
    dense = attn.run(np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v))
    assert out.tobytes() == dense.tobytes()
    assert not out_buf[:, :, :64].any() and not out_buf[:, :, 192:].any()


def test_capacity_grows_when_not_given(rng):
    attn = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="fp16")
    small = make_problem(rng, "fp16", 2, 2, 64, 64, [3], [3])
    big = make_problem(rng, "fp16", 2, 2, 64, 64, [3000] + [1] * 40, [5000] + [2] * 40)
    for q, k, v, qo, kv in (small, big, small):
        attn.plan(qo, kv, causal=True)
        want = mlakit.reference_prefill(q, k, v, qo, kv, causal=True)
        assert relative_error(attn.run(q, k, v), want) <= TOL["fp16"]
    assert attn.max_batch >= 41 and attn.max_q_tokens >= 3040 and attn.max_kv_tokens >= 5080


def test_empty_batches(rng):
    attn = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="fp16", max_batch=4, max_q_tokens=8, max_kv_tokens=8)
    e = np.zeros((0, 2, 64), np.float16)
    attn.plan([0], [0])  # batch_size 0
    assert attn.run(e, e, e).shape == (0, 2, 64)
    # Sequences without q rows, or without keys (out = 0, lse = -inf).
    q = rng.standard_normal((4, 2, 64)).astype(np.float16)
    kv_t = np.zeros((0, 2, 64), np.float16)
    attn.plan([0, 0, 4], [0, 0, 0])
    out, lse = attn.run(q, kv_t, kv_t, return_lse=True)
    assert not out.any() and np.isneginf(lse).all()


def test_one_shot_ragged_prefill(rng):
    q, k, v, qo, kv = make_problem(rng, "fp16", 4, 4, 192, 128, [129, 2], [129, 300])
    out, lse = mlakit.ragged_prefill(q, k, v, qo, kv, causal=True, return_lse=True)
    check_against(out, lse, *mlakit.reference_prefill(q, k, v, qo, kv, causal=True, return_lse=True),
                  TOL["fp16"])


def test_default_sm_scale_is_inverse_sqrt_dqk(rng):
    q, k, v, qo, kv = make_problem(rng, "fp16", 2, 2, 64, 64, [30], [50])
    attn = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="fp16", max_batch=1, max_q_tokens=30, max_kv_tokens=50)
    attn.plan(qo, kv)
    default = attn.run(q, k, v)
    attn.plan(qo, kv, sm_scale=1.0 / math.sqrt(64))
    assert attn.run(q, k, v).tobytes() == default.tobytes()
    attn.plan(qo, kv, sm_scale=0.5)
    assert relative_error(attn.run(q, k, v), default) > 1e-2  # the scale is really applied


def test_runtime_queries():
    assert isinstance(mlakit.built_with_cuda(), bool)
    assert mlakit.cuda_device_count() >= 0
    assert mlakit.device_description("cpu") == "cpu"
    if mlakit.cuda_device_count() == 0:
        assert mlakit.cuda_unavailable_reason() != ""
    r = repr(mlakit.RaggedPrefill(2, 1, 64, 64, dtype="bf16", max_batch=1, max_q_tokens=1, max_kv_tokens=1))
    assert "num_kv_heads=1" in r and "'bf16'" in r


def test_capacity_sized_arrays_and_head_major_lse(rng):
    """Arrays with more rows than the plan (rows past it NaN: never read; out/lse past it
    untouched) and LSE in [H, rows] memory (lse_layout="ht"), through run() and ragged_prefill()."""
    q_lens, kv_lens = [40, 0, 7], [45, 3, 70]
    q, k, v, qo, kv = make_problem(rng, "fp16", 4, 2, 64, 32, q_lens, kv_lens)
    dtype = q.dtype
    tq, tk = int(qo[-1]), int(kv[-1])
    qp = np.concatenate([q, np.full((13, 4, 64), np.nan, dtype)])
    kp = np.concatenate([k, np.full((9, 2, 64), np.nan, dtype)])
    vp = np.concatenate([v, np.full((9, 2, 32), np.nan, dtype)])
    attn = mlakit.RaggedPrefill(4, 2, 64, 32, dtype=dtype, max_batch=3, max_q_tokens=tq + 13, max_kv_tokens=tk + 9)
    attn.plan(qo, kv, causal=True)
    want_out, want_lse = attn.run(q, k, v, return_lse=True)
    out = np.full((tq + 13, 4, 32), 5.0, dtype)
    got, lse_ht = attn.run(qp, kp, vp, out=out, return_lse=True, lse_layout="ht")
    assert got is out and lse_ht.shape == (4, tq + 13)
    assert np.array_equal(out[:tq], want_out) and np.all(out[tq:] == 5.0)
    assert np.array_equal(lse_ht[:, :tq].T, want_lse)
    out2, lse2 = mlakit.ragged_prefill(qp, kp, vp, qo, kv, causal=True, return_lse=True, lse_layout="ht")
    assert np.array_equal(out2[:tq], want_out) and np.array_equal(lse2[:, :tq].T, want_lse)
    with pytest.raises(ValueError, match=r"^mlakit: lse_layout: must be 'th'"):
        attn.run(q, k, v, return_lse=True, lse_layout="TH")
    with pytest.raises(ValueError, match=r"^mlakit: lse: with lse_layout='ht' it must be \[H, rows\]"):
        attn.run(q, k, v, lse=np.zeros((tq, 4), np.float32), lse_layout="ht")
