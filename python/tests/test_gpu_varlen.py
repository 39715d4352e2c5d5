"""GPU tests of the engine-facing torch API (skipped without a CUDA device):
mlakit.torch.flash_attn_varlen_func vs a PyTorch float32 reference and, where installed, vs
flash-attn 2's own results; a CUDA graph captured over capacity-sized buffers and static
cu_seqlens, re-planned with varlen_replan and replayed; torch.compile; merge_attn_states."""

import math

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402

if not torch.cuda.is_available() or mlakit.cuda_device_count() == 0:
    pytest.skip("needs a CUDA device and an mlakit build with CUDA: " +
                (mlakit.cuda_unavailable_reason() or "torch.cuda.is_available() is False"),
                allow_module_level=True)

import mlakit.torch as mt  # noqa: E402
from torch_ref import TOL, attention, check, indptr, relative_error  # noqa: E402

DEV = torch.device("cuda")
fa = mt.flash_attn_varlen_func


@pytest.fixture
def gen():
    return torch.Generator(device=DEV).manual_seed(99)


def inputs(gen, dtype, q_lens, kv_lens, heads, kv_heads, dqk, dvo, pad_q=0, pad_kv=0):
    """Device tensors with NaN rows past the batch; offsets on the device and on the host."""
    cq, ck = indptr(q_lens), indptr(kv_lens)
    tq, tk = int(cq[-1]), int(ck[-1])
    q = torch.randn(tq + pad_q, heads, dqk, generator=gen, device=DEV).to(dtype)
    k = torch.randn(tk + pad_kv, kv_heads, dqk, generator=gen, device=DEV).to(dtype)
    v = torch.randn(tk + pad_kv, kv_heads, dvo, generator=gen, device=DEV).to(dtype)
    for t, n in ((q, tq), (k, tk), (v, tk)):
        t[n:] = float("nan")
    return q, k, v, cq.to(DEV), ck.to(DEV), cq, ck


CASES = [  # heads, kv_heads, dqk, dvo, causal, window_size, softcap, scale
    (16, 16, 192, 128, True, (-1, -1), 0.0, None),   # MLA prefill, V not padded
    (16, 16, 192, 128, False, (-1, -1), 0.0, None),  # MLA context chunk
    (8, 2, 128, 128, True, (40, 0), 0.0, None),
    (4, 4, 64, 64, False, (20, -1), 5.0, 0.2),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"h{c[0]}kv{c[1]}d{c[2]}x{c[3]}c{int(c[4])}w{c[5][0]}")
def test_matches_reference(case, dtype, gen):
    heads, kv_heads, dqk, dvo, causal, window, cap, scale = case
    q_lens, kv_lens = [0, 1, 300, 77, 129], [5, 1, 400, 60, 129]
    q, k, v, cq, ck, cq_h, ck_h = inputs(gen, dtype, q_lens, kv_lens, heads, kv_heads, dqk, dvo, pad_q=50, pad_kv=9)
    tq = int(cq_h[-1])
    kw = dict(softmax_scale=scale, causal=causal, window_size=window, softcap=cap, return_softmax_lse=True)
    out, lse = fa(q, k, v, cq, ck, 300, 400, cu_seqlens_q_cpu=cq_h, cu_seqlens_k_cpu=ck_h, **kw)
    assert out.shape == (q.shape[0], heads, dvo) and lse.shape == (heads, q.shape[0])
    ref_causal = causal or window[1] == 0
    ref_out, ref_lse = attention(q[:tq], k[: int(ck_h[-1])], v[: int(ck_h[-1])], cq_h, ck_h, ref_causal, scale,
                                 window[0], cap)
    check(out[:tq], lse[:, :tq].T, ref_out, ref_lse, TOL[dtype])
    # Device offsets without host copies (read back: one synchronization) give the same bits.
    out2, lse2 = fa(q, k, v, cq, ck, 300, 400, **kw)
    assert torch.equal(out2[:tq], out[:tq]) and torch.equal(lse2[:, :tq], lse[:, :tq])


@pytest.mark.parametrize("dqk,dvo", [(128, 128), (192, 128)], ids=["d128", "mla_padV"])
def test_against_flash_attn_2(dqk, dvo, gen):
    flash_attn = pytest.importorskip("flash_attn", reason="flash-attn is not installed here")
    q_lens, kv_lens = [1, 300, 77, 129, 999], [64, 300, 200, 129, 999]
    q, k, v, cq, ck, cq_h, ck_h = inputs(gen, torch.bfloat16, q_lens, kv_lens, 16, 16, dqk, dvo)
    out, lse = fa(q, k, v, cq, ck, 999, 999, causal=True, return_softmax_lse=True,
                  cu_seqlens_q_cpu=cq_h, cu_seqlens_k_cpu=ck_h)
    # FA2 needs V padded to Dqk (what vLLM does for MLA); slice its output back.
    v_pad = torch.nn.functional.pad(v, (0, dqk - dvo)) if dvo != dqk else v
    fa_out, fa_lse, _ = flash_attn.flash_attn_varlen_func(q, k, v_pad, cq, ck, 999, 999, causal=True,
                                                          return_attn_probs=True)
    fa_out = fa_out[..., :dvo]
    assert relative_error(out, fa_out.float()) <= TOL[torch.bfloat16]
    assert (lse - fa_lse).abs().max().item() <= 2e-2


def test_cuda_graph_over_capacity_buffers(gen):
    """The engine pattern: static capacity-sized q/k/v/out and static device cu_seqlens padded by
    repeating the last offset; capture once, then per batch write the inputs, varlen_replan,
    replay. Rows past each batch: NaN in the inputs (never read), NaN in out (never written)."""
    heads, dqk, dvo, dtype = 16, 192, 128, torch.bfloat16
    max_q, max_kv, max_batch = 2048, 4096, 8
    q_buf = torch.zeros(max_q, heads, dqk, dtype=dtype, device=DEV)
    k_buf = torch.zeros(max_kv, heads, dqk, dtype=dtype, device=DEV)
    v_buf = torch.zeros(max_kv, heads, dvo, dtype=dtype, device=DEV)
    out_buf = torch.zeros(max_q, heads, dvo, dtype=dtype, device=DEV)
    cu_q_buf = torch.zeros(max_batch + 1, dtype=torch.int32, device=DEV)
    cu_k_buf = torch.zeros(max_batch + 1, dtype=torch.int32, device=DEV)

    def padded(offsets):  # vLLM pads the offsets of a smaller batch with its last value
        t = torch.full((max_batch + 1,), int(offsets[-1]), dtype=torch.int32)
        t[: len(offsets)] = offsets
        return t

    def load(q_lens, kv_lens):
        q, k, v, _, _, cq_h, ck_h = inputs(gen, dtype, q_lens, kv_lens, heads, heads, dqk, dvo)
        for buf, x in ((q_buf, q), (k_buf, k), (v_buf, v)):
            buf.fill_(float("nan"))
            buf[: x.shape[0]].copy_(x)
        cq_p, ck_p = padded(cq_h), padded(ck_h)
        cu_q_buf.copy_(cq_p)
        cu_k_buf.copy_(ck_p)
        return q, k, v, cq_h, ck_h, cq_p, ck_p

    def step(cq_p, ck_p):
        return fa(q_buf, k_buf, v_buf, cu_q_buf, cu_k_buf, max_q, max_kv, causal=True, out=out_buf,
                  return_softmax_lse=True, cu_seqlens_q_cpu=cq_p, cu_seqlens_k_cpu=ck_p)

    first = load([300, 1, 64, 7], [500, 1, 64, 20])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(first[5], first[6])  # warm-up outside the capture: makes the plan
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, static_lse = step(first[5], first[6])

    for q_lens, kv_lens in [([300, 1, 64, 7], [500, 1, 64, 20]),
                            ([5, 17, 900, 0, 33, 1000, 1, 2], [5, 40, 1200, 9, 33, 1500, 1, 600]),
                            ([2, 2], [3, 100])]:
        q, k, v, cq_h, ck_h, cq_p, ck_p = load(q_lens, kv_lens)
        assert mt.varlen_replan(cu_q_buf, cu_k_buf, cq_p, ck_p) == 1
        out_buf.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        tq = q.shape[0]
        ref_out, ref_lse = attention(q, k, v, cq_h, ck_h, causal=True)
        check(out_buf[:tq], static_lse[:, :tq].T, ref_out, ref_lse, TOL[dtype])
        assert torch.isnan(out_buf[tq:]).all(), "the replay wrote rows past the batch"


def test_torch_compile(gen):
    q, k, v, cq, ck, cq_h, ck_h = inputs(gen, torch.bfloat16, [100, 1, 250], [300, 1, 250], 16, 16, 192, 128)

    def f(q, k, v, cq, ck, cq_h, ck_h):
        out, lse = fa(q * 2.0, k, v, cq, ck, 250, 300, causal=True, return_softmax_lse=True,
                      cu_seqlens_q_cpu=cq_h, cu_seqlens_k_cpu=ck_h)
        return (out.float() * 3.0).sum(-1), lse + 1.0

    got = torch.compile(f, fullgraph=True)(q, k, v, cq, ck, cq_h, ck_h)
    want = f(q, k, v, cq, ck, cq_h, ck_h)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


def test_merge_attn_states(gen):
    n, h, d = 1000, 16, 128
    p = torch.randn(n, h, d, device=DEV, generator=gen).bfloat16()
    s = torch.randn(n, h, d, device=DEV, generator=gen).bfloat16()
    p_lse = torch.randn(h, n, device=DEV, generator=gen) * 3
    s_lse = torch.randn(h, n, device=DEV, generator=gen) * 3
    p_lse[:, :10] = -math.inf
    s_lse[:, 5:15] = math.inf  # FlashAttention-2's empty rows
    out, out_lse = torch.empty_like(p), torch.empty(h, n, device=DEV)
    mt.merge_attn_states(out, p, p_lse, s, s_lse, out_lse)
    pl = torch.where(torch.isinf(p_lse), -math.inf, p_lse)
    sl = torch.where(torch.isinf(s_lse), -math.inf, s_lse)
    want_lse = torch.logaddexp(pl, sl)
    fin = torch.isfinite(want_lse)
    m = torch.where(fin, want_lse, 0.0)
    want = p.float() * torch.exp(pl - m).T[..., None] + s.float() * torch.exp(sl - m).T[..., None]
    want[~fin.T] = 0.0
    torch.testing.assert_close(out_lse[fin], want_lse[fin])
    assert torch.isneginf(out_lse[~fin]).all()
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=1e-2)


def test_device_offsets_alone_version_rule(gen, monkeypatch):
    """CUDA cu_seqlens without host copies, the same tensors every call: unchanged offsets skip
    the read-back; an in-place write through torch is seen (read back, re-planned, right
    result); a write behind torch's back (a .data alias: its own version counter) is not, until
    varlen_replan re-reads; with the rule switched off every call reads back."""
    import mlakit._varlen as V

    reads = []
    real = V._read_back
    monkeypatch.setattr(V, "_read_back", lambda a, b: reads.append(1) or real(a, b))
    q, k, v, cq, ck, _, _ = inputs(gen, torch.bfloat16, [30, 70], [40, 90], 8, 8, 64, 64, pad_q=60, pad_kv=60)

    def call(verify=True):
        out, lse = fa(q, k, v, cq, ck, 100, 150, causal=True, return_softmax_lse=True)
        if verify:
            cq_h, ck_h = cq.cpu(), ck.cpu()
            tq, tk = int(cq_h[-1]), int(ck_h[-1])
            ref_out, ref_lse = attention(q[:tq], k[:tk], v[:tk], cq_h, ck_h, True)
            check(out[:tq], lse[:, :tq].T, ref_out, ref_lse, TOL[torch.bfloat16])

    call()
    assert len(reads) == 1
    call()
    assert len(reads) == 1, "unchanged offsets were read back"
    # New lengths within the first batch's totals (100 q, 130 kv): rows past those are NaN.
    cq.copy_(indptr([90, 10]).to(DEV))
    ck.copy_(indptr([100, 30]).to(DEV))
    call()
    assert len(reads) == 2, "an in-place write was not seen"
    cq.data.copy_(indptr([50, 50]).to(DEV))  # behind the version counter
    ck.data.copy_(indptr([60, 60]).to(DEV))
    call(verify=False)
    assert len(reads) == 2
    assert mt.varlen_replan(cq, ck) >= 1 and len(reads) == 3
    call()
    assert len(reads) == 3
    old = mt.varlen_trust_version(False)
    try:
        call()
        call()
        assert len(reads) == 5
    finally:
        mt.varlen_trust_version(old)
