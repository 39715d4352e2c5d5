"""GPU tests with PyTorch (skipped without a CUDA device): the CUDA kernels through the binding
vs a PyTorch float32 reference on random ragged batches, the caller's stream, torch.compile, and
CUDA graph capture/replay after re-planning."""

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402

if not torch.cuda.is_available() or mlakit.cuda_device_count() == 0:
    pytest.skip("needs a CUDA device and an mlakit build with CUDA: " +
                (mlakit.cuda_unavailable_reason() or "torch.cuda.is_available() is False"),
                allow_module_level=True)

import mlakit.torch as mt  # noqa: E402
from torch_ref import TOL, attention, check, indptr, random_ragged  # noqa: E402

DEV = torch.device("cuda")


def problem(gen, dtype, heads, kv_heads, dqk, dvo, q_lens, kv_lens):
    qo, kv = indptr(q_lens), indptr(kv_lens)
    q = torch.randn(int(qo[-1]), heads, dqk, generator=gen, device=DEV).to(dtype)
    k = torch.randn(int(kv[-1]), kv_heads, dqk, generator=gen, device=DEV).to(dtype)
    v = torch.randn(int(kv[-1]), kv_heads, dvo, generator=gen, device=DEV).to(dtype)
    return q, k, v, qo, kv


@pytest.fixture
def gen():
    return torch.Generator(device=DEV).manual_seed(7)


@pytest.fixture
def cpu_gen():
    return torch.Generator().manual_seed(11)


CASES = [  # heads, kv_heads, dqk, dvo, causal, window, soft_cap, sm_scale
    (16, 16, 192, 128, True, -1, 0.0, None),
    (16, 16, 192, 128, False, -1, 0.0, None),
    (8, 2, 128, 128, True, 37, 0.0, None),
    (4, 4, 64, 64, False, 20, 0.0, None),
    (4, 2, 64, 64, True, -1, 3.0, 0.2),
    (2, 1, 192, 128, True, 70, 20.0, None),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"h{c[0]}kv{c[1]}d{c[2]}x{c[3]}c{int(c[4])}w{c[5]}s{c[6]}")
def test_random_ragged_vs_torch(case, dtype, gen, cpu_gen):
    heads, kv_heads, dqk, dvo, causal, window, cap, scale = case
    for trial in range(2):
        q_lens, kv_lens = random_ragged(cpu_gen, batch=7, max_len=300, device=DEV)
        q_lens[0], q_lens[1] = 0, 1  # always include empty and single-token sequences
        q, k, v, qo, kv = problem(gen, dtype, heads, kv_heads, dqk, dvo, q_lens, kv_lens)
        attn = mlakit.RaggedPrefill(heads, kv_heads, dqk, dvo, dtype=dtype, device=DEV, max_batch=8,
                                    max_q_tokens=4096, max_kv_tokens=8192)
        attn.plan(qo, kv, causal=causal, window_left=window, logits_soft_cap=cap or None, sm_scale=scale)
        out, lse = attn.run(q, k, v, return_lse=True)
        ref_out, ref_lse = attention(q, k, v, qo, kv, causal, scale, window, cap)
        check(out, lse, ref_out, ref_lse, TOL[dtype])
        # The custom ops give the same bits.
        out2, lse2 = mt.ragged_prefill(attn, q, k, v, return_lse=True)
        assert torch.equal(out2, out) and torch.equal(lse2, lse)


def test_runs_on_callers_stream(gen):
    q, k, v, qo, kv = problem(gen, torch.bfloat16, 16, 16, 192, 128, [500, 3], [700, 3])
    attn = mlakit.RaggedPrefill(16, 16, 192, 128, dtype="bf16", device="cuda", max_batch=2,
                                max_q_tokens=503, max_kv_tokens=703)
    attn.plan(qo, kv, causal=True)
    want = attn.run(q, k, v)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        attn.plan(qo, kv, causal=True)  # plan's copy is ordered on the same (current) stream
        out = torch.empty_like(want)
        for _ in range(3):
            mt.ragged_prefill_out(attn, q, k, v, out)
    side.synchronize()
    assert torch.equal(out, want)


def test_merge_states_gpu(gen):
    n, h, d = 1000, 16, 128
    a = torch.randn(n, h, d, device=DEV, generator=gen).bfloat16()
    b = torch.randn(n, h, d, device=DEV, generator=gen).bfloat16()
    la = torch.randn(n, h, device=DEV, generator=gen) * 3
    lb = torch.randn(n, h, device=DEV, generator=gen) * 3
    la[:10] = -float("inf")
    lb[5:15] = -float("inf")
    out, lse = mt.merge_states(a, la, b, lb)
    want_lse = torch.logaddexp(la, lb)
    m = torch.where(torch.isneginf(want_lse), 0.0, want_lse)
    want = (a.float() * torch.exp(la - m)[..., None] + b.float() * torch.exp(lb - m)[..., None])
    want[torch.isneginf(want_lse)] = 0
    fin = torch.isfinite(want_lse)
    torch.testing.assert_close(lse[fin], want_lse[fin])
    assert torch.isneginf(lse[~fin]).all()
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=1e-2)


def test_opcheck_cuda(gen):
    q, k, v, qo, kv = problem(gen, torch.bfloat16, 8, 8, 192, 128, [33, 64], [40, 64])
    attn = mlakit.RaggedPrefill(8, 8, 192, 128, dtype="bf16", device="cuda", max_batch=2,
                                max_q_tokens=97, max_kv_tokens=104)
    attn.plan(qo, kv, causal=True)
    out = torch.empty(q.shape[0], 8, 128, dtype=torch.bfloat16, device=DEV)
    lse = torch.empty(q.shape[0], 8, device=DEV)
    torch.library.opcheck(torch.ops.mlakit.ragged_prefill.default, (q, k, v, attn.handle))
    torch.library.opcheck(torch.ops.mlakit.ragged_prefill_out.default, (q, k, v, out, lse, attn.handle))


def test_torch_compile(gen):
    q, k, v, qo, kv = problem(gen, torch.bfloat16, 16, 16, 192, 128, [100, 1, 250], [300, 1, 250])
    attn = mlakit.RaggedPrefill(16, 16, 192, 128, dtype="bf16", device="cuda", max_batch=3,
                                max_q_tokens=351, max_kv_tokens=551)
    attn.plan(qo, kv, causal=True)

    def f(q, k, v):
        out, lse = mt.ragged_prefill(attn, q * 2.0, k, v, return_lse=True)
        return (out.float() * 3.0).sum(-1), lse + 1.0

    compiled = torch.compile(f, fullgraph=True)
    got = compiled(q, k, v)
    want = f(q, k, v)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


def test_cuda_graph_replay_after_replan(gen, cpu_gen):
    heads, dqk, dvo, dtype = 16, 192, 128, torch.bfloat16
    max_q, max_kv = 2048, 4096
    attn = mlakit.RaggedPrefill(heads, heads, dqk, dvo, dtype=dtype, device="cuda", max_batch=8,
                                max_q_tokens=max_q, max_kv_tokens=max_kv)
    # Static buffers at capacity; the graph sees views of them.
    q_buf = torch.zeros(max_q, heads, dqk, dtype=dtype, device=DEV)
    k_buf = torch.zeros(max_kv, heads, dqk, dtype=dtype, device=DEV)
    v_buf = torch.zeros(max_kv, heads, dvo, dtype=dtype, device=DEV)
    out_buf = torch.zeros(max_q, heads, dvo, dtype=dtype, device=DEV)
    lse_buf = torch.zeros(max_q, heads, device=DEV)

    def load(q_lens, kv_lens):
        q, k, v, qo, kv = problem(gen, dtype, heads, heads, dqk, dvo, q_lens, kv_lens)
        q_buf[: q.shape[0]].copy_(q)
        k_buf[: k.shape[0]].copy_(k)
        v_buf[: v.shape[0]].copy_(v)
        return q, k, v, qo, kv

    first = load([300, 1, 64, 7], [500, 1, 64, 20])
    t_q, t_kv = first[0].shape[0], first[1].shape[0]
    attn.plan(first[3], first[4], causal=True)

    def step():
        mt.ragged_prefill_out(attn, q_buf[:t_q], k_buf[:t_kv], v_buf[:t_kv], out_buf[:t_q], lse_buf[:t_q])

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm up outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    for q_lens, kv_lens in [([300, 1, 64, 7], [500, 1, 64, 20]),        # same batch
                            ([5, 17, 900, 0, 33], [5, 40, 1200, 9, 33]),  # larger totals
                            ([2, 2], [3, 100])]:                          # smaller totals
        q, k, v, qo, kv = load(q_lens, kv_lens)
        out_buf.fill_(float("nan"))
        attn.plan(qo, kv, causal=True)
        graph.replay()
        torch.cuda.synchronize()
        tq = q.shape[0]
        ref_out, ref_lse = attention(q, k, v, qo, kv, causal=True)
        check(out_buf[:tq], lse_buf[:tq], ref_out, ref_lse, TOL[dtype])


def test_cuda_graph_functional_op(gen):
    q, k, v, qo, kv = problem(gen, torch.float16, 8, 2, 128, 128, [70, 130], [70, 400])
    attn = mlakit.RaggedPrefill(8, 2, 128, 128, dtype="fp16", device="cuda", max_batch=2,
                                max_q_tokens=200, max_kv_tokens=470)
    attn.plan(qo, kv, causal=True)
    sq, sk, sv = q.clone(), k.clone(), v.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        mt.ragged_prefill(attn, sq, sk, sv)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = mt.ragged_prefill(attn, sq, sk, sv)
    q2, k2, v2, _, _ = problem(gen, torch.float16, 8, 2, 128, 128, [70, 130], [70, 400])
    sq.copy_(q2), sk.copy_(k2), sv.copy_(v2)
    graph.replay()
    torch.cuda.synchronize()
    ref_out, _ = attention(q2, k2, v2, qo, kv, causal=True)
    from torch_ref import relative_error
    assert relative_error(static_out, ref_out) <= TOL[torch.float16]


def test_cuda_indptr_is_rejected():
    attn = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="fp16", device="cuda", max_batch=1, max_q_tokens=4,
                                max_kv_tokens=4)
    with pytest.raises(TypeError, match=r"^mlakit: qo_indptr: must be a host"):
        attn.plan(torch.tensor([0, 4], dtype=torch.int32, device=DEV), [0, 4])


def test_device_mismatch_is_type_error(gen):
    attn = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="fp16", device="cuda", max_batch=1, max_q_tokens=4,
                                max_kv_tokens=4)
    attn.plan([0, 4], [0, 4])
    x = torch.zeros(4, 2, 64, dtype=torch.float16)  # CPU tensors for a CUDA plan
    with pytest.raises(TypeError, match=r"^mlakit: "):
        attn.run(x, x, x)
