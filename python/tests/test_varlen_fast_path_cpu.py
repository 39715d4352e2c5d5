"""flash_attn_varlen_func's per-call path (mlakit._varlen._run) on CPU tensors: what the plan in
force is checked against, what happens after the launch (LRU order, marking plans a CUDA graph
captured: CPU stand-ins for a CUDA q and a capture in progress), and the version-counter rule's
tensor-identity test."""

import pytest

torch = pytest.importorskip("torch")

import mlakit._varlen as V  # noqa: E402
import mlakit.torch as mt  # noqa: E402
from torch_ref import TOL, attention, check, indptr  # noqa: E402

fa = mt.flash_attn_varlen_func


def qkv(gen, rows_q, rows_k, heads=2, kv_heads=1, dqk=16, dvo=8):
    return (torch.randn(rows_q, heads, dqk, generator=gen).bfloat16(),
            torch.randn(rows_k, kv_heads, dqk, generator=gen).bfloat16(),
            torch.randn(rows_k, kv_heads, dvo, generator=gen).bfloat16())


def expect(out, q, k, v, cq, ck, causal=True):
    tq, tk = int(cq[-1]), int(ck[-1])
    ref_out, ref_lse = attention(q[:tq], k[:tk], v[:tk], cq, ck, causal)
    check(out[:tq], ref_lse, ref_out, ref_lse, TOL[q.dtype], lse_atol=1e-4)


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(V, "_plans", type(V._plans)())
    return V._plans


class _OnDevice(torch.Tensor):
    """A CPU tensor whose get_device() says 0: _run takes the CUDA-device branches (capture
    check, per-device plans) while the extension still reads a CPU tensor (is_cuda is False)."""
    __torch_function__ = torch._C._disabled_torch_function_impl

    def get_device(self):
        return 0


def test_plans_are_fixed_size():
    """_Plan.run is the native run bound once: valid only because a plan's RaggedPrefill has every
    capacity fixed (it never replaces its native object)."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = qkv(gen, 9, 9)
    cq = indptr([4, 5])
    fa(q, k, v, cq, cq, 5, 5, causal=True)
    for plan in V._plans.values():
        assert all(plan.attn._fixed) and plan.run.__self__ is plan.attn._impl


def test_lru_eviction_after_fresh_calls(fresh_cache, monkeypatch):
    """The LRU order is updated after the launch on the fast path: the plan used last survives
    an eviction; a plan a graph captured is never evicted."""
    monkeypatch.setattr(V, "_MAX_PLANS", 3)
    gen = torch.Generator().manual_seed(2)
    q, k, v = qkv(gen, 9, 9)
    cq = indptr([4, 5])

    def call(window):
        return fa(q, k, v, cq, cq, 5, 5, causal=True, window_size=(window, 0))

    for w in (1, 2, 3):
        call(w)
    keys = list(fresh_cache)
    fresh_cache[keys[1]].captured = True      # window 2: as if a graph captured it
    call(1)                                   # fresh: moves window 1 to the end
    assert list(fresh_cache)[-1] == keys[0]
    call(4)                                   # a fourth plan: evicts the least recent, window 3
    windows = sorted(key[7] for key in fresh_cache)
    assert windows == [1, 2, 4], windows


def test_capture_marks_the_plan_after_the_launch(fresh_cache, monkeypatch):
    """During a (stand-in) capture: a call whose plan is in force launches and marks the plan
    captured; other lengths in host copies raise (no plan can be made); no plan raises."""
    monkeypatch.setattr(V, "_stream_of", lambda device: 0)
    capturing = [False]
    monkeypatch.setattr(V, "_is_capturing", lambda: capturing[0])
    gen = torch.Generator().manual_seed(3)
    q, k, v = qkv(gen, 12, 12)
    qd = q.as_subclass(_OnDevice)
    cq, cq2 = indptr([5, 7]), indptr([6, 6])
    args = (0.0, True, -1, 0.0)
    out = V._run(qd, k, v, cq, cq, None, None, *args, None, None, True)  # plans, outside a capture
    (plan,) = fresh_cache.values()
    assert fresh_cache and next(iter(fresh_cache))[0] == 0 and not plan.captured
    expect(out, q, k, v, cq, cq)
    capturing[0] = True
    out = V._run(qd, k, v, cq, cq.clone(), None, None, *args, None, None, True)
    assert plan.captured
    expect(out, q, k, v, cq, cq)
    with pytest.raises(RuntimeError, match=r"^mlakit: cu_seqlens_q: the lengths differ from the plan in force"):
        V._run(qd, k, v, cq2, cq2, None, None, *args, None, None, True)
    with pytest.raises(RuntimeError, match=r"^mlakit: cu_seqlens_q: no plan for these cu_seqlens tensors"):
        V._run(qd, k, v, cq, cq, None, None, 0.5, True, -1, 0.0, None, None, True)
    capturing[0] = False
    V._run(qd, k, v, cq2, cq2, None, None, *args, None, None, True)  # re-plans outside the capture
    assert plan.lengths == ((0, 6, 12), (0, 6, 12))


def test_version_rule_identity():
    """The same tensor object is the cheap identity test; a new view of the same base matches
    through the base, also once the view the plan was made from is gone; a tensor at the same
    address but another object does not."""
    base = torch.arange(8, dtype=torch.int32)
    ck = torch.arange(4, dtype=torch.int32)
    src = V._source(base[:5], ck)             # the view itself is freed at once
    assert V._same_source(src, base[:5], ck)  # matched through its base
    assert not V._same_source(src, base.clone()[:5], ck)  # (the address is in the plan key)
    cq = base[:5]
    src = V._source(cq, ck)
    assert V._same_source(src, cq, ck)
    alias = torch.empty(0, dtype=torch.int32).set_(ck.untyped_storage(), 0, (4,), (1,))
    assert alias.data_ptr() == ck.data_ptr() and not V._same_source(src, cq, alias)
    cq.resize_(4)                              # another shape, same object
    assert not V._same_source(src, cq, ck)


class _Cuda(torch.Tensor):
    """A CPU tensor that says it is on a CUDA device (attributes at plain-tensor speed)."""
    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def is_cuda(self):
        return True

    @property
    def is_cpu(self):
        return False


def test_host_copies_on_a_cuda_device_are_refused(fresh_cache):
    """cu_seqlens_*_cpu on a CUDA device: a TypeError naming the argument, on the first call and
    when a plan for the same offsets exists (such copies are never taken as unchanged)."""
    gen = torch.Generator().manual_seed(5)
    q, k, v = qkv(gen, 9, 9)
    cq = indptr([4, 5])
    for copy in (cq.clone().as_subclass(_Cuda), cq.tolist()):
        with pytest.raises(TypeError, match=r"^mlakit: cu_seqlens_q_cpu: must be a host \(CPU\) tensor"):
            fa(q, k, v, cq, cq, 5, 5, causal=True, cu_seqlens_q_cpu=cq.clone().as_subclass(_Cuda),
               cu_seqlens_k_cpu=copy)
        fa(q, k, v, cq, cq, 5, 5, causal=True, cu_seqlens_q_cpu=cq, cu_seqlens_k_cpu=cq)  # makes the plan
    assert V._offsets_key(cq.clone().as_subclass(_Cuda), cq) is None


def test_same_source_arguments():
    """The extension's _same_source: None (no record) and non-tensors never match; a record not
    made by _source is an error, not a silent mismatch."""
    cq = torch.arange(3, dtype=torch.int32)
    src = V._source(cq, cq)
    assert V._same_source(src, cq, cq) and not V._same_source(None, cq, cq)
    assert not V._same_source(src, cq, [0, 1, 2])
    with pytest.raises(ValueError, match=r"^mlakit: src: expected the 10-tuple"):
        V._same_source(src[:8], cq, cq)


def test_version_rule_needs_1d_offsets():
    """Offsets of another rank never match a record, even one made from them (varlen_replan with
    host copies records the CUDA offsets without reading them): the call then reads them back,
    and the read-back's check names the argument."""
    cq = torch.arange(4, dtype=torch.int32).reshape(2, 2)
    ck = torch.arange(3, dtype=torch.int32)
    assert not V._same_source(V._source(cq, ck), cq, ck)
    assert V._same_source(V._source(ck, ck), ck, ck)
