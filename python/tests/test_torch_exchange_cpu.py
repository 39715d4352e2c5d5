"""torch tensors read through PyTorch's DLPack C exchange table (python/src/torch_exchange.h): the
table is found when torch has it, every view it gives equals the attribute reads' (the path it
replaces) and torch's own metadata, run() without out= returns a fresh q.new_empty-like output
equal to run(out=), and MLAKIT_TORCH_EXCHANGE=0 turns the table off with the same results."""

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402
import mlakit.torch  # noqa: E402,F401  (registers torch with the extension)

_C = mlakit._C
HAS_TABLE = hasattr(torch.Tensor, "__dlpack_c_exchange_api__") or hasattr(torch.Tensor, "__c_dlpack_exchange_api__")
DTYPE_CODES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2, torch.float64: 3, torch.int32: 4}


def _tensors():
    """(name, tensor): the layouts and dtypes the launch functions are given."""
    base = torch.arange(5 * 4 * 8, dtype=torch.float32).reshape(5, 4, 8)
    yield "contiguous", base
    yield "offset slice", base[1:, :, 3:]
    yield "strided", base[:, :, ::2]
    yield "transposed", base.transpose(0, 1)
    yield "broadcast (stride 0)", base[:1].expand(5, 4, 8)
    yield "empty", base[:0]
    yield "size-1 dims", base[2:3, 1:2]
    yield "0-d", base[0, 0, 0]
    yield "requires grad", base.clone().requires_grad_()
    yield "parameter (subclass)", torch.nn.Parameter(base.clone())
    for dt in DTYPE_CODES:
        yield f"dtype {dt}", base.to(dt)


def test_table_found_when_torch_has_one():
    if not HAS_TABLE:
        pytest.skip(f"torch {torch.__version__} has no DLPack exchange table: the attribute reads are used")
    assert _C._torch_exchange_in_use(), "torch.Tensor has __dlpack_c_exchange_api__ but the extension did not take it"


@pytest.mark.skipif(not HAS_TABLE, reason="torch without a DLPack exchange table")
@pytest.mark.parametrize("name,t", list(_tensors()), ids=[n for n, _ in _tensors()])
def test_exchange_view_equals_attribute_view(name, t):
    got = _C._read_torch_view(t, "exchange")
    want = _C._read_torch_view(t, "attributes")
    assert want is not None
    assert got == want, name
    # And both are torch's own metadata (degenerate strides aside: normalized to row-major).
    ptr, code, shape, strides, dev_type, dev_index = got
    assert ptr == t.data_ptr() and code == DTYPE_CODES[t.dtype] and shape == tuple(t.shape)
    assert (dev_type, dev_index) == (0, 0)
    if t.numel() > 0:
        assert all(s == ts for s, ts, n in zip(strides, t.stride(), t.shape) if n != 1)


def test_unsupported_dtype_is_read_by_neither():
    t = torch.zeros(3, 4, dtype=torch.int64)
    assert _C._read_torch_view(t, "exchange") is None
    assert _C._read_torch_view(t, "attributes") is None
    with pytest.raises(ValueError, match="path"):
        _C._read_torch_view(t, "dlpack")


def _plan():
    attn = mlakit.RaggedPrefill(4, 2, 32, 16, dtype=torch.bfloat16, max_batch=2, max_q_tokens=14,
                                max_kv_tokens=19)
    attn.plan(torch.tensor([0, 5, 14], dtype=torch.int32), torch.tensor([0, 7, 19], dtype=torch.int32),
              causal=True)
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(14, 4, 32, generator=gen).to(torch.bfloat16)
    k = torch.randn(19, 2, 32, generator=gen).to(torch.bfloat16)
    v = torch.randn(19, 2, 16, generator=gen).to(torch.bfloat16)
    return attn, q, k, v


def test_run_without_out_allocates_like_new_empty():
    attn, q, k, v = _plan()
    want = torch.full((14, 4, 16), float("nan"), dtype=torch.bfloat16)
    assert attn.run(q, k, v, out=want) is want
    a = attn.run(q, k, v)
    b = attn.run(q, k, v)
    for got in (a, b):
        assert type(got) is torch.Tensor and got.dtype == q.dtype and got.device == q.device
        assert got.shape == (14, 4, 16) and got.is_contiguous()
        assert torch.equal(got, want)
    assert a.data_ptr() != b.data_ptr()  # a fresh output per call, never a shared buffer
    # q with more rows than the plan (a capacity buffer): out has q's rows; those past the batch
    # are not written, as with out= given.
    big = torch.cat([q, q[:3]])
    got = attn.run(big, k, v)
    assert got.shape == (17, 4, 16) and torch.equal(got[:14], want)


def test_run_without_out_rejects_like_before():
    attn, q, k, v = _plan()
    with pytest.raises(ValueError, match="q: must have 3 dimensions"):
        attn.run(q.reshape(14, 128), k, v)
    with pytest.raises(TypeError, match="k"):
        attn.run(q, None, v)
    with pytest.raises(ValueError):
        attn.run(q, k[:, :1], v)  # kv heads do not match the plan
    # The native call: out None with a torch q is allocated; with a non-torch q it is an error.
    assert attn._impl.run(q, k, v, None, None, None).shape == (14, 4, 16)
    with pytest.raises(TypeError, match="out"):
        attn._impl.run(q.float().numpy(), k.float().numpy(), v.float().numpy(), None, None, 0)


def test_switched_off_by_environment_same_results():
    code = (
        "import torch, mlakit, mlakit.torch, sys\n"
        "print(int(mlakit._C._torch_exchange_in_use()))\n"
        "a = mlakit.RaggedPrefill(4, 2, 32, 16, dtype=torch.bfloat16, max_batch=2, max_q_tokens=14, max_kv_tokens=19)\n"
        "a.plan(torch.tensor([0, 5, 14], dtype=torch.int32), torch.tensor([0, 7, 19], dtype=torch.int32), causal=True)\n"
        "g = torch.Generator().manual_seed(5)\n"
        "q = torch.randn(14, 4, 32, generator=g).to(torch.bfloat16)\n"
        "k = torch.randn(19, 2, 32, generator=g).to(torch.bfloat16)\n"
        "v = torch.randn(19, 2, 16, generator=g).to(torch.bfloat16)\n"
        "sys.stdout.buffer.write(a.run(q, k, v).float().numpy().tobytes())\n")
    outs = {}
    for flag in ("0", "1"):
        # The child imports mlakit from where this process found it (conftest's sys.path), as the
        # test further down does, not only when PYTHONPATH happens to be set.
        env = dict(os.environ, MLAKIT_TORCH_EXCHANGE=flag, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
        first, rest = r.stdout.split(b"\n", 1)
        outs[flag] = (int(first), rest)
    assert outs["0"][0] == 0
    assert outs["1"][0] == int(HAS_TABLE)
    assert outs["0"][1] == outs["1"][1] and len(outs["0"][1]) == 14 * 4 * 16 * 4


@pytest.mark.parametrize("form", ["int32", "int32 strided", "int32 transposed", "int32 lengths", "int64",
                                  "int64 lengths", "subclass"])
def test_mla_plan_reads_torch_host_tables_as_numpy(rng, form):
    """MlaStep.plan() takes torch CPU tensors (engines' block tables and lengths) as they are: the
    extension reads them itself (int32 or int64, any strides; a subclass through NumPy). Every form
    plans the same step as the NumPy int32 table."""
    from test_mla_cpu import BS, DN, DV, H, L, R, make_case

    c = make_case(rng, [7, 4], [19, 33])
    step = mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=BS,
                          num_blocks=c["cache"].shape[0], max_batch=2, max_tokens=16, max_context_tokens=64)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    want = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], c["cache"].copy())
    bt = torch.from_numpy(c["bt"].copy())
    q_lens, ctx_lens = c["q_lens"], c["ctx_lens"]
    table = {
        "int32": bt,
        "int32 strided": bt.repeat_interleave(2, dim=1)[:, ::2],  # column stride 2
        "int32 transposed": bt.t().contiguous().t(),  # column-major
        "int32 lengths": bt,
        "int64": bt.to(torch.int64),
        "int64 lengths": bt.to(torch.int64),
        "subclass": torch.nn.Parameter(bt, requires_grad=False),
    }[form]
    if form.endswith("lengths"):
        dt = torch.int32 if form.startswith("int32") else torch.int64
        q_lens, ctx_lens = torch.tensor(q_lens, dtype=dt), torch.tensor(ctx_lens, dtype=dt)
    step.plan(q_lens, ctx_lens, table)
    got = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], c["cache"].copy())
    np.testing.assert_array_equal(got, want)


def test_mla_plan_torch_tables_refused_by_name(rng):
    """What the extension cannot take from a torch tensor fails naming the argument, and a
    rejected plan keeps the previous one."""
    from test_mla_cpu import BS, DN, DV, H, L, R, make_case

    c = make_case(rng, [5, 3], [10, 0])
    step = mlakit.MlaStep(H, L, DN, R, DV, dtype="fp16", device="cpu", block_size=BS,
                          num_blocks=c["cache"].shape[0], max_batch=2, max_tokens=8, max_context_tokens=16)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    want = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], c["cache"].copy())
    bt = torch.from_numpy(c["bt"].copy())
    with pytest.raises(ValueError, match="block_table"):
        step.plan(c["q_lens"], c["ctx_lens"], bt[:, None, :])  # 3-D
    with pytest.raises(ValueError, match="block_table"):
        step.plan(c["q_lens"], c["ctx_lens"], bt.reshape(-1))  # 1-D
    with pytest.raises(TypeError, match="block_table"):
        step.plan(c["q_lens"], c["ctx_lens"], bt.to(torch.float32))
    with pytest.raises(ValueError, match="block_table"):
        step.plan(c["q_lens"], c["ctx_lens"], bt.to(torch.int64) + 2**33)  # past int32
    with pytest.raises(ValueError, match="query_lens"):
        step.plan(torch.tensor([[5, 3]], dtype=torch.int32), c["ctx_lens"], bt)  # 2-D lengths
    bad = bt.clone()
    bad[0, 0] = c["cache"].shape[0]
    with pytest.raises(ValueError, match="block_table"):
        step.plan(c["q_lens"], c["ctx_lens"], bad)
    got = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], c["cache"].copy())
    np.testing.assert_array_equal(got, want)


def test_first_plan_with_a_torch_table_registers_torch():
    """A process whose first mlakit call is plan() with a torch block table: that call registers
    torch, so the table goes to the extension as it is from the first step on."""
    code = (
        "import torch, mlakit\n"
        "assert mlakit._TorchTensor is None\n"
        "s = mlakit.MlaStep(2, 64, 128, 64, 128, dtype='fp16', device='cpu', block_size=16, num_blocks=64,\n"
        "                   max_batch=2, max_tokens=64, max_context_tokens=64)\n"
        "s.plan([5, 3], [10, 0], torch.tensor([[0, 1], [2, 3]], dtype=torch.int32))\n"
        "assert mlakit._TorchTensor is torch.Tensor\n"
        "print(s.info.total_context, s.info.visible_pairs)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # 10 context rows; request 0 sees 10 + 1..5 keys, request 1 sees 1..3.
    assert out.stdout.split() == ["10", str(sum(range(11, 16)) + sum(range(1, 4)))]
