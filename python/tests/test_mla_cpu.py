"""MlaStep through the Python binding on the CPU backend (NumPy fp16 arrays): the whole step
against a NumPy float64 re-creation (K and V materialized from the latents), the cache write,
context chunks, LSE, and errors naming the argument."""

import numpy as np
import pytest

import mlakit

H, L, DN, R, DV, BS = 2, 64, 128, 64, 128, 16


def make_case(rng, q_lens, ctx_lens, dtype=np.float16):
    need = [-(-(c + q) // BS) for q, c in zip(q_lens, ctx_lens)]
    num_blocks = sum(need) + 2
    ids = rng.permutation(num_blocks)  # shuffled blocks
    cols = max(need) + 1
    bt = np.full((len(q_lens), cols), -1, dtype=np.int32)
    k = 0
    for b, n in enumerate(need):
        bt[b, :n] = ids[k:k + n]
        k += n
    tq = sum(q_lens)
    q = rng.standard_normal((tq, H, DN + R)).astype(dtype)
    kv_c = rng.standard_normal((tq, L)).astype(dtype)
    k_pe = rng.standard_normal((tq, R)).astype(dtype)
    w = (rng.standard_normal((H * (DN + DV), L)) / np.sqrt(L)).astype(dtype)
    cache = rng.standard_normal((num_blocks, BS, L + R)).astype(dtype)
    return dict(q=q, kv_c=kv_c, k_pe=k_pe, w=w, cache=cache, bt=bt, q_lens=q_lens, ctx_lens=ctx_lens)


def numpy_reference(c):
    """Every request's K and V materialized from its latents, softmax over visible keys."""
    outs, lses, q0 = [], [], 0
    w = c["w"].astype(np.float64)
    for b, (n, ctx) in enumerate(zip(c["q_lens"], c["ctx_lens"])):
        lat = []
        for p in range(ctx):
            lat.append(c["cache"][c["bt"][b, p // BS], p % BS].astype(np.float64))
        for j in range(n):
            lat.append(np.concatenate([c["kv_c"][q0 + j], c["k_pe"][q0 + j]]).astype(np.float64))
        lat = np.array(lat).reshape(ctx + n, L + R)
        kv = (lat[:, :L] @ w.T).reshape(ctx + n, H, DN + DV)
        k = np.concatenate([kv[..., :DN], np.broadcast_to(lat[:, None, L:], (ctx + n, H, R))], axis=-1)
        v = kv[..., DN:]
        qb = c["q"][q0:q0 + n].astype(np.float64)
        s = np.einsum("qhd,khd->hqk", qb, k) / np.sqrt(DN + R)
        mask = np.arange(ctx + n)[None, :] <= (ctx + np.arange(n))[:, None]
        s = np.where(mask[None], s, -np.inf)
        m = s.max(-1, keepdims=True)
        e = np.exp(s - m)
        outs.append(np.einsum("hqk,khd->qhd", e / e.sum(-1, keepdims=True), v))
        lses.append((m[..., 0] + np.log(e.sum(-1))).T)
        q0 += n
    return np.concatenate(outs), np.concatenate(lses)


def rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))


@pytest.mark.parametrize("upload_in_run", [False, True], ids=["upload_in_plan", "upload_in_run"])
@pytest.mark.parametrize("workspace_rows", [0, 48], ids=["one_launch", "chunks"])
def test_step_matches_numpy_reference_and_writes_cache(rng, workspace_rows, upload_in_run):
    c = make_case(rng, [20, 1, 9], [0, 37, 70])
    ref_out, ref_lse = numpy_reference(c)
    step = mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=BS,
                          num_blocks=c["cache"].shape[0], max_batch=4, max_tokens=32,
                          max_context_tokens=128, workspace_rows=workspace_rows,
                          upload_in_run=upload_in_run, absorb_max_query_len=0)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    assert step.info.chunked == (workspace_rows > 0)
    cache = c["cache"].copy()
    out, lse = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], cache, return_lse=True)
    assert not np.isnan(out).any()
    assert rel(out, ref_out) < 5e-3
    assert np.max(np.abs(lse - ref_lse) / (1 + np.abs(ref_lse))) < 5e-3
    # The new tokens' latents at their slots, nothing else changed.
    want = c["cache"].copy()
    t = 0
    for b, (n, ctx) in enumerate(zip(c["q_lens"], c["ctx_lens"])):
        for j in range(n):
            p = ctx + j
            want[c["bt"][b, p // BS], p % BS] = np.concatenate([c["kv_c"][t], c["k_pe"][t]])
            t += 1
    np.testing.assert_array_equal(cache, want)


def test_bad_block_table_and_weight_are_named(rng):
    c = make_case(rng, [5, 3], [10, 0])
    step = mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=BS,
                          num_blocks=c["cache"].shape[0], max_batch=2, max_tokens=8, max_context_tokens=16)
    bad = c["bt"].copy()
    bad[0, 0] = c["cache"].shape[0]
    with pytest.raises(ValueError, match="block_table"):
        step.plan(c["q_lens"], c["ctx_lens"], bad)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    cache = c["cache"].copy()
    with pytest.raises(ValueError, match="kv_b_proj"):
        step.run(c["q"], c["kv_c"], c["k_pe"], c["w"].T.copy(), cache)
    np.testing.assert_array_equal(cache, c["cache"])  # nothing written


@pytest.mark.parametrize("form", ["int64", "uint32", "strided", "fortran", "list"])
def test_block_table_forms_plan_the_same_step(rng, form):
    """The extension reads a 2-D block table through its strides (no flattening in Python): every
    host form of the same table gives the same output as the contiguous int32 array."""
    c = make_case(rng, [7, 4], [19, 33])
    step = mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=BS,
                          num_blocks=c["cache"].shape[0], max_batch=2, max_tokens=16, max_context_tokens=64)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    want = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], c["cache"].copy())
    bt = c["bt"]
    table = {
        "int64": bt.astype(np.int64),
        "uint32": np.where(bt < 0, 0, bt).astype(np.uint32),
        "strided": np.repeat(bt, 2, axis=1)[:, ::2],  # a view with column stride 2
        "fortran": np.asfortranarray(bt),
        "list": bt.tolist(),
    }[form]
    assert form in ("list", "uint32") or not table.flags.c_contiguous or form == "int64"
    step.plan(c["q_lens"], c["ctx_lens"], table)
    got = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], c["cache"].copy())
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="block_table"):
        step.plan(c["q_lens"], c["ctx_lens"], bt[:, None, :])  # 3-D


def test_stream_graph_refuses_the_cpu():
    with pytest.raises(ValueError, match="device"):
        mlakit.StreamGraph("cpu")


def test_graph_rows_bucket():
    # The library's rule for MlaStep.plan(graph_rows=...): 256-row steps to 1024, then step_above.
    assert [mlakit.graph_rows_bucket(r, 8192) for r in (1, 256, 257, 999, 1025)] == [256, 256, 512, 1024, 1280]
    assert mlakit.graph_rows_bucket(8961, 8993) == 8993
    assert mlakit.graph_rows_bucket(1025, 8192, step_above=1024) == 2048
    with pytest.raises(ValueError, match="rows"):
        mlakit.graph_rows_bucket(9000, 8993)
    with pytest.raises(ValueError, match="step_above"):
        mlakit.graph_rows_bucket(5, 10, 0)


def _bucket(c, extra):
    """The case's layer tensors with `extra` NaN rows past the step (a token bucket)."""
    pad = lambda a: np.concatenate([a, np.full((extra,) + a.shape[1:], np.nan, a.dtype)])  # noqa: E731
    return pad(c["q"]), pad(c["kv_c"]), pad(c["k_pe"])


@pytest.mark.parametrize("workspace_rows", [0, 48], ids=["one_launch", "chunks"])
def test_outputs_it_allocates_hold_key_less_rows_past_the_step(rng, workspace_rows):
    """run() without out= at a bucket's row count: out has q's rows, the step's rows as without
    the bucket, and past them what a row with no key gets (out 0, lse -inf), never uninitialized
    memory. An out passed in keeps its rows past the step."""
    c = make_case(rng, [20, 1, 9], [0, 37, 70])
    tq, extra = 30, 11
    step = mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=BS,
                          num_blocks=c["cache"].shape[0], max_batch=4, max_tokens=48,
                          max_context_tokens=128, workspace_rows=workspace_rows,
                          absorb_max_query_len=0)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    want, want_lse = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], c["cache"].copy(), return_lse=True)
    q, kv_c, k_pe = _bucket(c, extra)
    out, lse = step.run(q, kv_c, k_pe, c["w"], c["cache"].copy(), return_lse=True)
    assert out.shape == (tq + extra, H, DV) and lse.shape == (tq + extra, H)
    np.testing.assert_array_equal(out[:tq], want)
    np.testing.assert_array_equal(lse[:tq], want_lse)
    assert np.all(out[tq:] == 0) and np.all(np.isneginf(lse[tq:]))
    assert np.all(step.run(q, kv_c, k_pe, c["w"], c["cache"].copy())[tq:] == 0)  # out alone
    given = np.full((tq + extra, H, DV), 7, np.float16)
    out2, lse2 = step.run(q, kv_c, k_pe, c["w"], c["cache"].copy(), out=given, return_lse=True)
    assert out2 is given and np.all(given[tq:] == 7) and np.all(np.isneginf(lse2[tq:]))
    np.testing.assert_array_equal(given[:tq], want)


def test_outputs_it_allocates_hold_key_less_rows_past_the_step_torch(rng):
    torch = pytest.importorskip("torch")
    c = make_case(rng, [5, 3], [10, 0])
    step = mlakit.MlaStep(H, L, DN, R, DV, dtype=torch.float16, device="cpu", block_size=BS,
                          num_blocks=c["cache"].shape[0], max_batch=2, max_tokens=16, max_context_tokens=16)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    q, kv_c, k_pe = (torch.from_numpy(a) for a in _bucket(c, 5))
    out, lse = step.run(q, kv_c, k_pe, torch.from_numpy(c["w"]), torch.from_numpy(c["cache"].copy()),
                        return_lse=True)
    assert out.shape == (13, H, DV) and torch.all(out[8:] == 0) and torch.all(torch.isneginf(lse[8:]))
    assert not torch.isnan(out[:8]).any() and torch.isfinite(lse[:8]).all()


@pytest.mark.parametrize("workspace_rows", [0, 48], ids=["one_launch", "chunks"])
def test_lse_takes_any_non_overlapping_strides(rng, workspace_rows):
    """As RaggedPrefill.run: lse [T, H], or an [H, T] array's .T (FlashAttention's layout), in one
    launch and with context chunks merged through it; an overlapping view is refused by name."""
    c = make_case(rng, [20, 1, 9], [0, 37, 70])
    step = mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=BS,
                          num_blocks=c["cache"].shape[0], max_batch=4, max_tokens=32,
                          max_context_tokens=128, workspace_rows=workspace_rows,
                          absorb_max_query_len=0)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    want, want_lse = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], c["cache"].copy(), return_lse=True)
    lse_ht = np.full((H, 30), np.nan, np.float32)
    out = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], c["cache"].copy(), lse=lse_ht.T)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(lse_ht.T, want_lse)
    shared = np.lib.stride_tricks.as_strided(lse_ht, shape=(30, H), strides=(4, 0))
    cache = c["cache"].copy()
    with pytest.raises(ValueError, match=r"^mlakit: lse: elements overlap in memory"):
        step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], cache, lse=shared)
    np.testing.assert_array_equal(cache, c["cache"])  # nothing written


@pytest.mark.parametrize("workspace_rows", [0, 48], ids=["one_launch", "chunks"])
def test_fp8_attention_within_fp8_error(rng, workspace_rows):
    """fp8_attention=True: the step on e4m3 q, K and V stays within e4m3's error of the float64
    re-creation (docs/fp8.md: ~4%) and is not the 16-bit answer."""
    c = make_case(rng, [20, 1, 9], [0, 37, 70])
    ref_out, ref_lse = numpy_reference(c)
    kw = dict(dtype="fp16", device="cpu", block_size=BS, num_blocks=c["cache"].shape[0], max_batch=4,
              max_tokens=32, max_context_tokens=128, workspace_rows=workspace_rows, absorb_max_query_len=0)
    step = mlakit.MlaStep(H, L, DN, R, DV, fp8_attention=True, **kw)
    assert step.fp8_attention and not mlakit.MlaStep(H, L, DN, R, DV, **kw).fp8_attention
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    out, lse = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], c["cache"].copy(), return_lse=True)
    assert not np.isnan(out).any()
    assert 1e-3 < rel(out, ref_out) < 6e-2
    assert np.max(np.abs(lse - ref_lse) / (1 + np.abs(ref_lse))) < 0.15


@pytest.mark.parametrize("workspace_rows", [0, 30], ids=["one_launch", "chunks"])
def test_absorbed_requests_match_numpy_reference(rng, workspace_rows):
    # Decode and MTP requests (absorbed: new tokens <= 3 and <= their context) next to a prefill
    # chunk and a request whose one new token has no context (up-projected).
    c = make_case(rng, [1, 20, 3, 1, 2], [40, 5, 70, 0, 1])
    ref_out, ref_lse = numpy_reference(c)
    step = mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=BS,
                          num_blocks=c["cache"].shape[0], max_batch=8, max_tokens=28,
                          max_context_tokens=128, workspace_rows=workspace_rows, absorb_max_query_len=3)
    assert step.absorb_max_query_len == 3
    assert step.graph_shape(c["q_lens"], c["ctx_lens"]) == (4, 27 + 5 + 0 + 1)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    assert (step.info.absorbed_requests, step.info.absorbed_tokens) == (2, 4)
    assert step.info.chunked == (workspace_rows > 0)
    cache = c["cache"].copy()
    out, lse = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], cache, return_lse=True)
    assert not np.isnan(out).any()
    assert rel(out, ref_out) < 5e-3
    assert np.max(np.abs(lse - ref_lse) / (1 + np.abs(ref_lse))) < 5e-3


def test_absorbing_by_default_on_the_cpu_and_named_when_refused():
    step = mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=BS, num_blocks=4,
                          max_batch=2, max_tokens=8)
    assert step.absorb_max_query_len > 0  # the CPU backend's measured crossover
    assert mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=24, num_blocks=4,
                          max_batch=2, max_tokens=8).absorb_max_query_len == 0  # no latent attention there
    with pytest.raises(ValueError, match="absorb_max_query_len"):
        mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=24, num_blocks=4,
                       max_batch=2, max_tokens=8, absorb_max_query_len=2)


def test_sparse_step_matches_numpy_reference(rng):
    # DeepSeek-V3.2 with topk 8: tokens at positions >= 8 attend to the 8 positions their row of
    # the indices names (repeats count, -1 and positions past the request's keys are skipped);
    # the others densely, as the dense reference computes them.
    c = make_case(rng, [12, 1, 3], [0, 20, 4])
    ref_out, ref_lse = numpy_reference(c)
    T, K = sum(c["q_lens"]), 8
    idx = np.full((T, K), -1, dtype=np.int32)
    w = c["w"].astype(np.float64)
    t = 0
    for b, (n, ctx) in enumerate(zip(c["q_lens"], c["ctx_lens"])):
        for j in range(n):
            p = ctx + j
            if p >= K:
                row = rng.integers(0, p + 1, size=K - 2)
                idx[t, :K - 2] = row
                idx[t, K - 2] = ctx + n  # past the request's keys: skipped
                lat = np.array([c["cache"][c["bt"][b, e // BS], e % BS] if e < ctx else
                                np.concatenate([c["kv_c"][t - j + e - ctx], c["k_pe"][t - j + e - ctx]])
                                for e in row]).astype(np.float64)
                kv = (lat[:, :L] @ w.T).reshape(len(row), H, DN + DV)
                k = np.concatenate([kv[..., :DN], np.broadcast_to(lat[:, None, L:], (len(row), H, R))], -1)
                sc = np.einsum("hd,khd->hk", c["q"][t].astype(np.float64), k) / np.sqrt(DN + R)
                m = sc.max(-1, keepdims=True)
                e_ = np.exp(sc - m)
                ref_out[t] = np.einsum("hk,khd->hd", e_ / e_.sum(-1, keepdims=True), kv[..., DN:])
                ref_lse[t] = m[:, 0] + np.log(e_.sum(-1))
            t += 1
    step = mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=BS,
                          num_blocks=c["cache"].shape[0], max_batch=4, max_tokens=32, max_context_tokens=128,
                          max_topk=K)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"], topk=K)
    assert step.info.sparse_tokens == 4 + 1 + 0
    assert step.graph_shape(c["q_lens"], c["ctx_lens"], topk=K)[0] == 5
    cache = c["cache"].copy()
    with pytest.raises(ValueError, match="indices"):
        step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], cache)
    np.testing.assert_array_equal(cache, c["cache"])  # refused: nothing written
    out, lse = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], cache, indices=idx, return_lse=True)
    assert not np.isnan(out).any()
    assert rel(out, ref_out) < 5e-3
    assert np.max(np.abs(lse - ref_lse) / (1 + np.abs(ref_lse))) < 5e-3
