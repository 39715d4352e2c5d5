"""merge_states on the CPU backend vs a NumPy float64 formula and the C++ float64 reference,
including the -inf edge cases, in-place use, and the property it exists for: attention over two
disjoint key sets, merged, equals attention over their union."""

import numpy as np
import pytest

import mlakit
from attn_ref import BF16, TOL, make_problem, numpy_merge, relative_error

MERGE_DTYPES = [np.float16, np.float32] + ([BF16] if BF16 is not None else [])
MERGE_TOL = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 1e-6}
if BF16 is not None:
    MERGE_TOL[BF16] = 1e-2


def states(rng, n, h, d, dtype):
    out = rng.standard_normal((n, h, d)).astype(dtype)
    lse = (3 * rng.standard_normal((n, h))).astype(np.float32)
    return out, lse


@pytest.mark.parametrize("dtype", MERGE_DTYPES, ids=lambda d: np.dtype(d).name)
def test_merge_matches_formula(dtype, rng):
    n, h, d = 37, 3, 128
    out_a, lse_a = states(rng, n, h, d, dtype)
    out_b, lse_b = states(rng, n, h, d, dtype)
    # -inf on one side passes the other through; both -inf gives 0 / -inf.
    lse_a[0, :] = -np.inf
    lse_b[1, :] = -np.inf
    lse_a[2, 1] = lse_b[2, 1] = -np.inf
    out, lse = mlakit.merge_states(out_a, lse_a, out_b, lse_b)
    assert out.dtype == np.dtype(dtype) and lse.dtype == np.float32
    want_out, want_lse = numpy_merge(out_a, lse_a, out_b, lse_b)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want_lse))
    fin = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[fin], want_lse[fin], rtol=1e-5, atol=1e-5)
    assert relative_error(out, want_out) <= MERGE_TOL[np.dtype(dtype)]
    assert np.all(out[2, 1].astype(np.float64) == 0.0)
    np.testing.assert_array_equal(out[0], out_b[0])  # exact pass-through
    np.testing.assert_array_equal(out[1], out_a[1])

    ref_out, ref_lse = mlakit.reference_merge_states(out_a, lse_a, out_b, lse_b)
    assert ref_out.dtype == np.float64
    np.testing.assert_allclose(ref_out, want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ref_lse[fin], want_lse[fin], rtol=1e-12)


def test_merge_in_place(rng):
    out_a, lse_a = states(rng, 20, 4, 64, np.float16)
    out_b, lse_b = states(rng, 20, 4, 64, np.float16)
    want_out, want_lse = mlakit.merge_states(out_a, lse_a, out_b, lse_b)
    got_out, got_lse = mlakit.merge_states(out_a, lse_a, out_b, lse_b, out=out_a, lse_out=lse_a)
    assert got_out is out_a and got_lse is lse_a
    np.testing.assert_array_equal(out_a, want_out)
    np.testing.assert_array_equal(lse_a, want_lse)


def test_split_kv_then_merge_equals_full_attention(rng):
    # Each sequence's keys split into a prefix (context chunk) and the rest (new tokens); both
    # parts non-causal so every row sees keys in at least one of them.
    q_lens, kv_lens = [33, 1, 140], [70, 9, 200]
    cut = [25, 4, 129]
    q, k, v, qo, kv = make_problem(rng, "fp16", 4, 2, 192, 128, q_lens, kv_lens)
    idx_a = np.concatenate([np.arange(kv[b], kv[b] + cut[b]) for b in range(3)])
    idx_b = np.concatenate([np.arange(kv[b] + cut[b], kv[b + 1]) for b in range(3)])
    kv_a = np.cumsum([0] + cut)
    kv_b = np.cumsum([0] + [kv_lens[b] - cut[b] for b in range(3)])
    attn = mlakit.RaggedPrefill(4, 2, 192, 128, dtype="fp16", max_batch=3, max_q_tokens=200, max_kv_tokens=300)
    attn.plan(qo, kv_a)
    out_a, lse_a = attn.run(q, k[idx_a], v[idx_a], return_lse=True)
    attn.plan(qo, kv_b)
    out_b, lse_b = attn.run(q, k[idx_b], v[idx_b], return_lse=True)
    out, lse = mlakit.merge_states(out_a, lse_a, out_b, lse_b)
    want_out, want_lse = mlakit.reference_prefill(q, k, v, qo, kv, return_lse=True)
    assert relative_error(out, want_out) <= TOL["fp16"]
    assert relative_error(lse, want_lse) <= 1e-5


def test_merge_rejects_bad_inputs(rng):
    out_a, lse_a = states(rng, 5, 2, 16, np.float16)
    with pytest.raises(TypeError, match=r"^mlakit: lse_a: "):
        mlakit.merge_states(out_a, lse_a.astype(np.float16), out_a, lse_a)
    with pytest.raises(TypeError, match=r"^mlakit: out_b: "):
        mlakit.merge_states(out_a, lse_a, out_a.astype(np.float32), lse_a)
    with pytest.raises(ValueError, match=r"^mlakit: "):
        mlakit.merge_states(out_a, lse_a, out_a[:4], lse_a[:4])
    sentinel = np.full_like(out_a, 7.0)
    with pytest.raises((ValueError, TypeError)):
        mlakit.merge_states(out_a, lse_a, out_a, lse_a, out=sentinel, lse_out=np.zeros((5, 3), np.float32))
    assert np.all(sentinel == 7.0)  # nothing written on a rejected call
