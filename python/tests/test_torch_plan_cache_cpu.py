"""The per-call path of mlakit.torch on CPU tensors (run in CI): eager calls skip the custom-op
dispatch and give the same bits as the op and torch.compile; the plan cache re-plans exactly
when the offsets' values change (in place, through NumPy views, in lists); the
version-counter rule for CUDA offsets without host copies, on its own and through the calls
(CPU tensors that report is_cuda standing in for CUDA ones)."""

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402
import mlakit._varlen as V  # noqa: E402
import mlakit.torch as mt  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch_ref import TOL, attention, check, indptr  # noqa: E402

fa = mt.flash_attn_varlen_func


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(777)


@pytest.fixture
def calls(monkeypatch):
    """Records (trust, planned) per call of the implementation: trust is True on the direct path."""
    log = []
    run, plan = V._run, mlakit.RaggedPrefill.plan

    def run_spy(*args, trust=False):
        log.append(["direct" if trust else "op", 0])
        return run(*args, trust=trust)

    def plan_spy(self, *args, **kwargs):
        if log:
            log[-1][1] += 1
        return plan(self, *args, **kwargs)

    monkeypatch.setattr(V, "_run", run_spy)
    monkeypatch.setattr(mlakit.RaggedPrefill, "plan", plan_spy)
    return log


def qkv(gen, rows_q, rows_k, heads=4, kv_heads=2, dqk=32, dvo=16, dtype=torch.bfloat16):
    return (torch.randn(rows_q, heads, dqk, generator=gen).to(dtype),
            torch.randn(rows_k, kv_heads, dqk, generator=gen).to(dtype),
            torch.randn(rows_k, kv_heads, dvo, generator=gen).to(dtype))


def expect(out, lse, q, k, v, cq, ck, causal=True):
    tq, tk = int(cq[-1]), int(ck[-1])
    ref_out, ref_lse = attention(q[:tq], k[:tk], v[:tk], cq, ck, causal)
    check(out[:tq], lse[:, :tq].T, ref_out, ref_lse, TOL[q.dtype], lse_atol=1e-4)


def test_eager_calls_skip_the_op_and_match_it(gen, calls):
    q, k, v = qkv(gen, 40, 60)
    cq, ck = indptr([10, 30]), indptr([25, 35])
    out, lse = fa(q, k, v, cq, ck, 30, 35, causal=True, return_softmax_lse=True)
    assert [c[0] for c in calls] == ["direct"]
    args = (q, k, v, cq, ck, None, None, 0.0, True, -1, 0.0)
    op_out, op_lse = torch.ops.mlakit.flash_attn_varlen_with_lse(*args)
    assert calls[-1][0] == "op"
    assert torch.equal(out, op_out) and torch.equal(lse, op_lse)
    expect(out, lse, q, k, v, cq, ck)


def test_same_bits_under_torch_compile(gen, calls):
    q, k, v = qkv(gen, 33, 50, dtype=torch.float16)
    cq, ck = indptr([3, 30]), indptr([20, 30])

    def f(q, k, v, cq, ck):
        return fa(q, k, v, cq, ck, 30, 30, causal=True, return_softmax_lse=True)

    eager = f(q, k, v, cq, ck)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v, cq, ck)
    assert "op" in [c[0] for c in calls] and calls[0][0] == "direct"
    assert torch.equal(eager[0], compiled[0]) and torch.equal(eager[1], compiled[1])


def test_dispatch_modes_and_fake_tensors_take_the_op(gen, calls):
    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    q, k, v = qkv(gen, 8, 8)
    cq = indptr([8])
    want = fa(q, k, v, cq, cq, 8, 8)
    with Log():
        got = fa(q, k, v, cq, cq, 8, 8)
    assert any("mlakit.flash_attn_varlen" in s for s in seen) and torch.equal(got, want)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fq, fk, fv, fc = (mode.from_tensor(t) for t in (q, k, v, cq))
        assert fa(fq, fk, fv, fc, fc, 8, 8).shape == (8, 4, 16)


def test_replans_when_offsets_change_in_place(gen, calls):
    """The same offset tensors, written in place between calls: through torch (version counter
    moves) and through a NumPy view (it does not: host offsets are compared by value)."""
    q, k, v = qkv(gen, 64, 80)
    cq, ck = indptr([10, 20, 30]), indptr([15, 25, 40])
    out = torch.empty(64, 4, 16, dtype=torch.bfloat16)
    for lens_q, lens_k, write in [([10, 20, 30], [15, 25, 40], None),
                                  ([30, 20, 10], [40, 25, 15], "torch"),
                                  ([1, 1, 60], [2, 3, 70], "numpy"),
                                  ([1, 1, 60], [2, 3, 70], None)]:
        if write == "torch":
            cq.copy_(indptr(lens_q))
            ck.copy_(indptr(lens_k))
        elif write == "numpy":
            cq.numpy()[:] = indptr(lens_q).numpy()
            ck.numpy()[:] = indptr(lens_k).numpy()
        _, lse = fa(q, k, v, cq, ck, 60, 70, causal=True, out=out, return_softmax_lse=True)
        assert calls[-1][1] == (0 if write is None and len(calls) > 1 else 1), (lens_q, write)
        expect(out, lse, q, k, v, cq, ck)


def test_host_copies_as_lists_and_tensors(gen, calls):
    """Host copies of the offsets: a list mutated in place, then CPU tensors with equal values
    (no re-plan: the values did not change), then other values (re-plan)."""
    q, k, v = qkv(gen, 50, 50)
    cq = indptr([20, 30])
    host = cq.tolist()
    first = fa(q, k, v, cq, cq, 30, 30, causal=True, cu_seqlens_q_cpu=host, cu_seqlens_k_cpu=host)
    assert calls[-1][1] == 1
    host[1] = 5  # lengths (5, 45): the caller's list object, changed
    cq.copy_(torch.tensor(host, dtype=torch.int32))
    got, lse = fa(q, k, v, cq, cq, 45, 45, causal=True, cu_seqlens_q_cpu=host, cu_seqlens_k_cpu=host,
                  return_softmax_lse=True)
    assert calls[-1][1] == 1
    expect(got, lse, q, k, v, cq, cq)
    same = fa(q, k, v, cq, cq, 45, 45, causal=True, cu_seqlens_q_cpu=torch.tensor(host, dtype=torch.int64),
              cu_seqlens_k_cpu=torch.tensor(host, dtype=torch.int32))
    assert calls[-1][1] == 0 and torch.equal(same, got)
    assert not torch.equal(first, got)


def test_capacity_sized_buffers_across_batches(gen, calls):
    """One set of capacity-sized buffers, batches of different sizes in turn: each result is
    right and rows past the batch keep the sentinel."""
    q, k, v = qkv(gen, 96, 128)
    out = torch.full((96, 4, 16), 5.0, dtype=torch.bfloat16)
    for lens_q, lens_k in [([40, 3], [50, 60]), ([1] * 7, [9] * 7), ([90], [128]), ([40, 3], [50, 60])]:
        cq, ck = indptr(lens_q), indptr(lens_k)
        out.fill_(5.0)
        _, lse = fa(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=True, out=out, return_softmax_lse=True)
        tq = int(cq[-1])
        assert torch.all(out[tq:] == 5.0)
        expect(out, lse, q, k, v, cq, ck)
    assert all(c[0] == "direct" for c in calls) and all(c[1] == 1 for c in calls)


def test_version_rule(gen):
    """_same_source, the rule a direct call with CUDA offsets alone uses to skip the read-back
    (device-agnostic; CPU tensors stand in): the same tensors or views of the same base, not
    written through torch since, match; an in-place write, another tensor, another length or
    stride, a freed tensor do not. Writes that bypass the version counter (a NumPy view here;
    Triton or DLPack consumers on the GPU) are not seen: the documented limit."""
    base = torch.zeros(9, dtype=torch.int32)
    cq, ck = base[:5], torch.arange(5, dtype=torch.int32)
    src = V._source(cq, ck)
    assert V._same_source(src, cq, ck)
    assert V._same_source(src, base[:5], ck)           # a new view of the same base
    assert not V._same_source(src, base[:4], ck)       # other length
    assert not V._same_source(src, base[::2], ck)      # other stride
    assert not V._same_source(src, cq, ck.clone())     # another tensor with equal values
    base[7] = 1                                        # any in-place write to the base
    assert not V._same_source(src, cq, ck)
    src = V._source(cq, ck)
    ck.add_(1)
    assert not V._same_source(src, cq, ck)
    src = V._source(cq, ck)
    base.numpy()[0] = 3                                # invisible to the version counter
    assert V._same_source(src, cq, ck)
    tmp = torch.arange(5, dtype=torch.int32)
    src = V._source(cq, tmp)
    del tmp                                            # freed: a new tensor never matches it
    assert not V._same_source(src, cq, torch.arange(5, dtype=torch.int32))


class _DeviceOffsets(torch.Tensor):
    """CPU offsets that say they are on a CUDA device: the path for CUDA cu_seqlens without host
    copies (plans keyed by address, version-counter rule, read-back) on a machine without a GPU.
    The kernel never reads cu_seqlens (the plan holds the lengths), so the results are real."""

    @property
    def is_cuda(self):
        return True


def test_device_offsets_alone_cpu_stand_in(gen, calls, monkeypatch):
    """CUDA cu_seqlens without host copies, the same tensors every call (CPU stand-ins; the GPU
    suite has the real thing): unchanged -> no read-back; written in place through torch -> read
    back, re-planned, right result; written behind the version counter (.data) -> not seen
    until varlen_replan re-reads; the rule switched off -> read back every call; through the
    custom op (torch.compile's path) -> read back every call."""
    reads = []
    monkeypatch.setattr(V, "_read_back", lambda a, b: reads.append(1) or (tuple(a.tolist()), tuple(b.tolist())))
    q, k, v = qkv(gen, 100, 150)
    cq = indptr([30, 70]).as_subclass(_DeviceOffsets)
    ck = indptr([40, 90]).as_subclass(_DeviceOffsets)
    out = torch.empty(100, 4, 16, dtype=torch.bfloat16)

    def call(verify=True):
        _, lse = fa(q, k, v, cq, ck, 90, 100, causal=True, out=out, return_softmax_lse=True)
        if verify:
            expect(out, lse, q, k, v, torch.Tensor(cq), torch.Tensor(ck))
        return calls[-1][1]

    assert call() == 1 and len(reads) == 1
    assert call() == 0 and len(reads) == 1, "unchanged offsets were read back"
    cq.copy_(indptr([90, 10]))
    ck.copy_(indptr([100, 50]))
    assert call() == 1 and len(reads) == 2, "an in-place write was not seen"
    cq.data.copy_(indptr([50, 50]))  # behind the version counter: the documented blind spot
    ck.data.copy_(indptr([60, 60]))
    assert call(verify=False) == 0 and len(reads) == 2
    assert mt.varlen_replan(cq, ck) == 1 and len(reads) == 3
    assert call() == 0 and len(reads) == 3
    old = mt.varlen_trust_version(False)
    try:
        call()
        call()
        assert len(reads) == 5
    finally:
        mt.varlen_trust_version(old)
    torch.ops.mlakit.flash_attn_varlen_out(q, k, v, cq, ck, None, None, 0.0, True, -1, 0.0, out, None)
    assert len(reads) == 6 and calls[-1][0] == "op"


def test_trust_switch_and_replan_without_copies(gen):
    old = mt.varlen_trust_version(False)
    try:
        assert mt.varlen_trust_version(False) is False
    finally:
        assert mt.varlen_trust_version(old) is False
    # CPU offsets never key a plan by address: nothing to re-plan, no error.
    cq = indptr([4])
    assert mt.varlen_replan(cq, cq) == 0
    with pytest.raises(ValueError, match=r"^mlakit: cu_seqlens_q_cpu: give both host copies or neither"):
        mt.varlen_replan(cq, cq, cq)


def test_eager_helpers_match_the_ops(gen):
    q, k, v = qkv(gen, 30, 40, dvo=32)
    cq, ck = indptr([10, 20]), indptr([15, 25])
    attn = mlakit.RaggedPrefill(4, 2, 32, 32, dtype=torch.bfloat16, max_batch=2, max_q_tokens=30, max_kv_tokens=40)
    attn.plan(cq, ck, causal=True)
    out, lse = mt.ragged_prefill(attn, q, k, v, return_lse=True, lse_layout="ht")
    op_out, op_lse = torch.ops.mlakit.ragged_prefill_with_lse(q, k, v, attn.handle, True)
    assert torch.equal(out, op_out) and torch.equal(lse, op_lse)
    assert torch.equal(mt.ragged_prefill(attn, q, k, v), op_out)
    into = torch.empty_like(out)
    mt.ragged_prefill_out(attn, q, k, v, into)
    assert torch.equal(into, op_out)
    a, b = torch.empty_like(out), torch.empty_like(out)
    mt.merge_attn_states(a, out, lse, op_out, op_lse)
    torch.ops.mlakit.merge_attn_states(b, out, lse, op_out, op_lse, None)
    assert torch.equal(a, b)
    m_out, m_lse = mt.merge_states(out, lse.T, op_out, op_lse.T)
    o_out, o_lse = torch.ops.mlakit.merge_states(out, lse.T, op_out, op_lse.T)
    assert torch.equal(m_out, o_out) and torch.equal(m_lse, o_lse)
