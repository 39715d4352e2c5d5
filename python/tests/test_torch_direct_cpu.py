"""The extension reads torch tensors itself (mlakit._register_torch): the launch functions take
torch tensors as they are, with the same views as the descriptor tuples and DLPack give, the
same errors naming the argument, and stream None = PyTorch's current stream of the first
tensor's device (0 on the CPU). _host_offsets_key, the bytes the plan cache of
flash_attn_varlen_func compares for host offsets."""

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402
import mlakit.torch  # noqa: E402,F401  (registers torch with the extension)

_C = mlakit._C


def _plan(heads=4, kv_heads=2, dqk=32, dvo=16, dtype=torch.bfloat16, lens=(5, 9), kv_lens=(7, 12)):
    attn = mlakit.RaggedPrefill(heads, kv_heads, dqk, dvo, dtype=dtype, max_batch=len(lens),
                                max_q_tokens=sum(lens), max_kv_tokens=sum(kv_lens))
    qo = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    kv = torch.tensor([0] + list(torch.tensor(kv_lens).cumsum(0)), dtype=torch.int32)
    attn.plan(qo, kv, causal=True)
    return attn, int(qo[-1]), int(kv[-1])


def _layouts(gen, tq, tk, heads=4, kv_heads=2, dqk=32, dvo=16, dtype=torch.bfloat16):
    """(name, q, k, v) in several layouts: contiguous, slices of a fused buffer, head-major
    storage seen token-major, extra rows past the batch."""
    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    q, k, v = rnd(tq, heads, dqk), rnd(tk, kv_heads, dqk), rnd(tk, kv_heads, dvo)
    yield "contiguous", q, k, v
    fused = rnd(tq, heads, 3 * dqk)
    fused[..., :dqk] = q
    kvbuf = rnd(tk, kv_heads, dqk + dvo)
    kvbuf[..., :dqk], kvbuf[..., dqk:] = k, v
    yield "fused slices", fused[..., :dqk], kvbuf[..., :dqk], kvbuf[..., dqk:]
    yield ("head-major storage", q.transpose(0, 1).contiguous().transpose(0, 1),
           k.transpose(0, 1).contiguous().transpose(0, 1), v)
    big = rnd(tq + 3, heads, dqk)
    big[:tq] = q
    yield "capacity rows", big[:tq], k, v


def test_tensors_read_directly_match_descriptors():
    gen = torch.Generator().manual_seed(11)
    attn, tq, tk = _plan()
    for name, q, k, v in _layouts(gen, tq, tk):
        out_t = torch.full((tq, 4, 16), 7.0, dtype=torch.bfloat16)
        out_d = out_t.clone()
        attn._impl.run(q, k, v, out_t, None, None)
        d = mlakit._torch_descriptor
        attn._impl.run(d(q), d(k), d(v), d(out_d), None, 0)
        assert torch.equal(out_t, out_d), name
        assert attn.run(q, k, v).equal(out_t), name


def test_lse_views_and_dlpack_agree():
    gen = torch.Generator().manual_seed(12)
    attn, tq, tk = _plan(dtype=torch.float16)
    q = torch.randn(tq, 4, 32, generator=gen).half()
    k, v = torch.randn(tk, 2, 32, generator=gen).half(), torch.randn(tk, 2, 16, generator=gen).half()
    out, lse_ht = torch.empty(tq, 4, 16, dtype=torch.half), torch.empty(4, tq)
    attn._impl.run(q, k, v, out, lse_ht.T, None)  # a transposed (strided) lse view
    out_np, lse_np = torch.empty_like(out), torch.empty(tq, 4)
    # NumPy arrays: the DLPack / buffer-protocol path.
    attn._impl.run(q.numpy(), k.numpy(), v.numpy(), out_np.numpy(), lse_np.numpy(), 0)
    assert torch.equal(out, out_np) and torch.equal(lse_ht.T, lse_np)


def test_subclasses_and_requires_grad():
    gen = torch.Generator().manual_seed(13)
    attn, tq, tk = _plan()
    q, k, v = (torch.randn(tq, 4, 32, generator=gen).bfloat16(), torch.randn(tk, 2, 32, generator=gen).bfloat16(),
               torch.randn(tk, 2, 16, generator=gen).bfloat16())
    want = attn.run(q, k, v)
    seen = []

    class Logged(torch.Tensor):  # attributes go through __torch_function__: read like any tensor
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    for qq, kk in [(torch.nn.Parameter(q.clone()), k), (q.clone().requires_grad_(), k),
                   (q.as_subclass(Logged), k.as_subclass(Logged))]:
        out = torch.empty_like(want)
        attn._impl.run(qq, kk, v, out, None, None)
        assert torch.equal(out, want), type(qq)
    assert seen, "the subclass's attributes were not read through torch"


def test_errors_name_the_argument():
    attn, tq, tk = _plan()
    q, k, v = torch.zeros(tq, 4, 32).bfloat16(), torch.zeros(tk, 2, 32).bfloat16(), torch.zeros(tk, 2, 16).bfloat16()
    out = torch.empty(tq, 4, 16, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"^mlakit: k: unsupported dtype int64"):
        attn._impl.run(q, k.long(), v, out, None, None)
    # Through DLPack after detach(): torch refuses to export tensors that require grad.
    with pytest.raises(TypeError, match=r"^mlakit: q: unsupported dtype complex64"):
        attn._impl.run(q.to(torch.complex64).requires_grad_(), k, v, out, None, None)
    with pytest.raises(ValueError, match=r"^mlakit: v: has 5 dimensions; mlakit takes at most 4"):
        attn._impl.run(q, k, v.reshape(1, 1, tk, 2, 16), out, None, None)
    # A device mlakit cannot address is named (not reported as a failed DLPack export).
    with pytest.raises(TypeError, match=r"^mlakit: out: is on device 'meta'; mlakit runs on cpu and cuda tensors$"):
        attn._impl.run(q, k, v, torch.empty(tq, 4, 16, dtype=torch.bfloat16, device="meta"), None, None)
    with pytest.raises(TypeError, match=r"^mlakit: q: dtype fp32 is not supported"):
        attn._impl.run(q.float(), k, v, out, None, None)


def test_a_device_mlakit_cannot_address_is_named():
    """A tensor on the meta device (or mps, xpu...) is reported by its device, whichever entry point
    meets it first: the tensor readers of run(), plan()'s host arrays, merge_states, the MLA step."""
    attn, tq, tk = _plan()
    q, k, v = torch.zeros(tq, 4, 32).bfloat16(), torch.zeros(tk, 2, 32).bfloat16(), torch.zeros(tk, 2, 16).bfloat16()
    words = r"is on device 'meta'; mlakit runs on cpu and cuda tensors$"
    with pytest.raises(TypeError, match=rf"^mlakit: q: {words}"):
        attn.run(q.to("meta"), k, v)
    with pytest.raises(TypeError, match=rf"^mlakit: v: {words}"):
        mlakit.ragged_prefill(q, k, v.to("meta"), [0, 5, 14], [0, 7, 19])
    with pytest.raises(TypeError, match=r"^mlakit: qo_indptr: is on device 'meta'; expected a host \(CPU\) int32 array$"):
        attn.plan(torch.zeros(3, dtype=torch.int32, device="meta"), [0, 7, 19])
    o, lse = torch.zeros(3, 2, 8), torch.zeros(3, 2)
    with pytest.raises(TypeError, match=rf"^mlakit: lse_b: {words}"):
        mlakit.merge_states(o, lse, o, lse.to("meta"))
    step = mlakit.MlaStep(2, 64, 32, 32, 32, dtype="bf16", num_blocks=2, max_batch=1, max_tokens=4)
    step.plan([2], [0], [[0]])
    rows = lambda n: torch.zeros(2, n, dtype=torch.bfloat16)  # noqa: E731
    with pytest.raises(TypeError, match=rf"^mlakit: kv_c: {words}"):
        step.run(torch.zeros(2, 2, 64, dtype=torch.bfloat16), rows(64).to("meta"), rows(32),
                 torch.zeros(128, 64, dtype=torch.bfloat16), torch.zeros(2, 16, 96, dtype=torch.bfloat16))


def test_stream_none_on_the_cpu():
    """stream None: PyTorch's current stream of the first tensor's device; 0 for CPU tensors and
    for arrays of other libraries (the Python layer passes those their library's stream)."""
    gen = torch.Generator().manual_seed(14)
    out_a, out_b = torch.randn(6, 2, 8, generator=gen), torch.randn(6, 2, 8, generator=gen)
    lse_a, lse_b = torch.randn(6, 2, generator=gen), torch.randn(6, 2, generator=gen)
    got, got_lse = torch.empty_like(out_a), torch.empty_like(lse_a)
    _C.merge_states(out_a, lse_a, out_b, lse_b, got, got_lse, None)
    want, want_lse = mlakit.merge_states(out_a.numpy(), lse_a.numpy(), out_b.numpy(), lse_b.numpy())
    assert torch.equal(got, torch.from_numpy(want)) and torch.equal(got_lse, torch.from_numpy(want_lse))


def test_host_offsets_key():
    key = _C._host_offsets_key
    a = torch.tensor([0, 3, 7], dtype=torch.int32)
    b = torch.tensor([0, 4, 9], dtype=torch.int32)
    assert key(a, b) == key(a.clone(), b.clone())            # values, not identity
    assert key(a, a) == key(a, a.clone())                    # one tensor for both
    assert key(a, b) != key(b, a)
    assert key(a, b) != key(a.long(), b)                     # the dtype counts
    assert key(a, b) != key(a[:2], b[:2])                    # so does the length
    assert key(a, b) != key(torch.tensor([0, 3], dtype=torch.int32), torch.tensor([7, 0, 4, 9], dtype=torch.int32))
    k0 = key(a, b)
    a.numpy()[1] = 2                                          # behind the version counter: seen
    assert key(a, b) != k0
    e = torch.zeros(0, dtype=torch.int32)
    assert key(e, e) is not None and key(e, e) != key(a, a)
    # Not a contiguous 1-D int32/int64 CPU tensor: None (the caller reads values instead).
    for bad in (torch.arange(6, dtype=torch.int32)[::2], torch.zeros(2, 2, dtype=torch.int32),
                torch.zeros(3, dtype=torch.int16), torch.zeros(3), [0, 3, 7], None,
                torch.zeros(3, dtype=torch.int32, device="meta")):
        assert key(a, bad) is None and key(bad, a) is None
    assert key(torch.arange(1, dtype=torch.int32)[::2], a) is not None  # one element: any stride


@pytest.mark.parametrize("heads", [1, 4])
def test_lse_head_major(heads):
    """run(..., lse_head_major=True): an [H, rows] lse read as its transpose (what
    flash_attn_varlen_func and the ragged_prefill helper pass instead of making lse.T): the same
    values as through the transposed view, for torch tensors and NumPy arrays, one head too
    (size-1 dimensions take the row-major strides of the transposed order)."""
    gen = torch.Generator().manual_seed(15)
    attn, tq, tk = _plan(heads=heads, kv_heads=1)
    q = torch.randn(tq, heads, 32, generator=gen).bfloat16()
    k, v = torch.randn(tk, 1, 32, generator=gen).bfloat16(), torch.randn(tk, 1, 16, generator=gen).bfloat16()
    out = torch.empty(tq, heads, 16, dtype=torch.bfloat16)
    want = torch.full((heads, tq), 9.0)
    attn._impl.run(q, k, v, out, want.T, None)
    got = torch.full((heads, tq), 9.0)
    attn._impl.run(q, k, v, out, got, None, True)
    assert torch.equal(got, want)
    got_np = torch.full((heads, tq), 9.0)
    attn._impl.run(q, k, v, out, got_np.numpy(), 0, True)
    assert torch.equal(got_np, want)
    with pytest.raises(ValueError, match=r"^mlakit: lse: given head-major it must be \[H, rows\] \(2 dimensions\)"):
        attn._impl.run(q, k, v, out, torch.empty(heads * tq), None, True)
