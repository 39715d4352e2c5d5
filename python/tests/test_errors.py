"""Errors from C++ arrive as Python exceptions of the mapped type with the C++ message unchanged:
kInvalidArgument/kUnsupported -> ValueError, kTypeMismatch -> TypeError, kRuntime -> RuntimeError.
Rejected calls write nothing."""

import numpy as np
import pytest

import mlakit
from mlakit import _C


@pytest.mark.parametrize("kind,exc", [(0, ValueError), (1, TypeError), (2, ValueError), (3, RuntimeError)])
def test_translation_keeps_type_and_message(kind, exc):
    with pytest.raises(exc) as info:
        _C._raise_for_kind(kind, "qo_indptr", "custom message 42")
    assert type(info.value) is exc
    assert str(info.value) == "mlakit: qo_indptr: custom message 42"
    with pytest.raises(exc) as info:
        _C._raise_for_kind(kind, "", "no argument")
    assert str(info.value) == "mlakit: no argument"


@pytest.fixture
def planned():
    attn = mlakit.RaggedPrefill(4, 2, 64, 64, dtype="fp16", max_batch=2, max_q_tokens=64, max_kv_tokens=64)
    attn.plan([0, 3, 10], [0, 5, 12], causal=True)
    q = np.zeros((10, 4, 64), np.float16)
    kv = np.zeros((12, 2, 64), np.float16)
    return attn, q, kv


def test_config_errors():
    with pytest.raises(ValueError, match=r"^mlakit: config\.num_kv_heads: .*multiple"):
        mlakit.RaggedPrefill(4, 3, 64, 64, dtype="fp16")
    with pytest.raises(TypeError, match=r"^mlakit: config\.dtype: "):
        mlakit.RaggedPrefill(4, 2, 64, 64, dtype="fp32")
    with pytest.raises(TypeError, match=r"^mlakit: dtype: unknown dtype"):
        mlakit.RaggedPrefill(4, 2, 64, 64, dtype="int8")
    with pytest.raises(ValueError, match=r"^mlakit: device: unknown device"):
        mlakit.RaggedPrefill(4, 2, 64, 64, dtype="fp16", device="tpu")
    with pytest.raises(ValueError, match=r"^mlakit: kv_split: must be 'auto', 'on' or 'off'"):
        mlakit.RaggedPrefill(4, 2, 64, 64, dtype="fp16", kv_split="sometimes")


def test_kv_split_setting_on_the_cpu_backend():
    # The CPU backend never splits key ranges, whatever the setting; the plan says so.
    for mode in ("auto", "on", "off"):
        attn = mlakit.RaggedPrefill(4, 2, 64, 64, dtype="fp16", kv_split=mode,
                                    max_batch=2, max_q_tokens=2000, max_kv_tokens=2000)
        attn.plan([0, 999], [0, 999], causal=True)
        assert attn.info.kv_split is False
        assert attn.info.split_slots == 0
        assert attn.info.kernel_arch == 0


@pytest.mark.skipif(mlakit.built_with_cuda(), reason="only meaningful for a CPU-only build")
def test_cuda_config_without_cuda_build():
    with pytest.raises(ValueError, match=r"^mlakit: config\.device: "):
        mlakit.RaggedPrefill(4, 2, 64, 64, dtype="fp16", device="cuda")


def test_plan_errors(planned):
    attn = planned[0]
    with pytest.raises(ValueError, match=r"^mlakit: qo_indptr: must be non-decreasing"):
        attn.plan([0, 3, 2], [0, 5, 12])
    with pytest.raises(ValueError, match=r"^mlakit: kv_indptr: "):
        attn.plan([0, 3, 4], [1, 5, 12])
    with pytest.raises(ValueError, match=r"^mlakit: kv_indptr: has 2 entries but qo_indptr has 3"):
        attn.plan([0, 3, 4], [0, 5])
    with pytest.raises(ValueError, match=r"^mlakit: qo_indptr: "):
        attn.plan([], [])
    with pytest.raises(ValueError, match=r"^mlakit: qo_indptr: .*max_q_tokens"):
        attn.plan([0, 3, 1000], [0, 5, 12])
    with pytest.raises(ValueError, match=r"^mlakit: qo_indptr: .*max_batch|^mlakit: .*batch"):
        attn.plan([0, 1, 2, 3], [0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"^mlakit: options\.window_left: "):
        attn.plan([0, 3, 10], [0, 5, 12], window_left=-2)
    with pytest.raises(ValueError, match=r"^mlakit: options\.logits_soft_cap: "):
        attn.plan([0, 3, 10], [0, 5, 12], logits_soft_cap=-1.0)
    with pytest.raises(ValueError, match=r"^mlakit: sm_scale: "):
        attn.plan([0, 3, 10], [0, 5, 12], sm_scale=0.0)
    with pytest.raises(TypeError, match=r"^mlakit: qo_indptr: must be an int32 or int64 array, got float32"):
        attn.plan(np.array([0, 3, 10], np.float32), [0, 5, 12])
    with pytest.raises(ValueError, match=r"^mlakit: kv_indptr: must be 1-D"):
        attn.plan([0, 3, 10], np.zeros((3, 1), np.int32))
    with pytest.raises(ValueError, match=r"^mlakit: qo_indptr: entry 2 .* does not fit in int32"):
        attn.plan(np.array([0, 3, 2**40], np.int64), [0, 5, 12])
    with pytest.raises(TypeError, match=r"^mlakit: qo_indptr: entry 1 is a str"):
        attn.plan([0, "3", 10], [0, 5, 12])
    with pytest.raises(TypeError, match=r"^mlakit: qo_indptr: expected a host int32 array"):
        attn.plan(None, [0, 5, 12])


def test_run_before_plan():
    attn = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="fp16", max_batch=1, max_q_tokens=4, max_kv_tokens=4)
    x = np.zeros((4, 2, 64), np.float16)
    with pytest.raises(ValueError, match=r"before plan"):
        attn.run(x, x, x)


def test_run_tensor_errors(planned):
    attn, q, kv = planned
    with pytest.raises(TypeError, match=r"^mlakit: q: dtype fp32 is not supported"):
        attn.run(q.astype(np.float32), kv, kv)
    with pytest.raises(TypeError, match=r"^mlakit: k: "):
        attn.run(q, kv.astype(np.float32), kv)
    with pytest.raises(ValueError, match=r"^mlakit: q: has 9 rows, fewer than the 10 tokens qo_indptr totals"):
        attn.run(q[:9], kv, kv)
    with pytest.raises(ValueError, match=r"^mlakit: k: "):
        attn.run(q, kv[:11], kv)
    with pytest.raises(ValueError, match=r"^mlakit: q: head dim 32 differs from config.head_dim_qk = 64"):
        attn.run(np.zeros((10, 4, 32), np.float16), kv, kv)
    with pytest.raises(ValueError, match=r"^mlakit: q: "):
        attn.run(np.zeros((10, 3, 64), np.float16), kv, kv)
    with pytest.raises(ValueError, match=r"^mlakit: q: the last dimension must be contiguous"):
        attn.run(np.zeros((10, 4, 128), np.float16)[:, :, ::2], kv, kv)
    with pytest.raises(ValueError, match=r"^mlakit: q: must have 3 dimensions"):
        attn.run(np.zeros((10, 4, 64, 1, 1), np.float16), kv, kv)
    with pytest.raises(ValueError, match=r"^mlakit: q: has 5 dimensions; mlakit takes at most 4"):
        attn.run(np.zeros((10, 4, 64, 1, 1), np.float16), kv, kv, out=np.zeros((10, 4, 64), np.float16))
    with pytest.raises(TypeError, match=r"^mlakit: q: unsupported dtype int64"):
        attn.run(np.zeros((10, 4, 64), np.int64), kv, kv, out=np.zeros((10, 4, 64), np.float16))
    with pytest.raises(TypeError, match=r"^mlakit: q: expected an array supporting DLPack"):
        attn.run([[1.0]], kv, kv, out=np.zeros((10, 4, 64), np.float16))
    with pytest.raises(TypeError, match=r"^mlakit: v: is None"):
        attn.run(q, kv, None)
    with pytest.raises(TypeError, match=r"^mlakit: out: dtype fp32 must equal the input dtype fp16"):
        attn.run(q, kv, kv, out=np.zeros((10, 4, 64), np.float32))
    with pytest.raises(TypeError, match=r"^mlakit: lse: dtype fp16 must be fp32"):
        attn.run(q, kv, kv, lse=np.zeros((10, 4), np.float16))
    readonly = np.zeros((10, 4, 64), np.float16)
    readonly.flags.writeable = False
    with pytest.raises(TypeError, match=r"^mlakit: out: expected a writable array"):
        attn.run(q, kv, kv, out=readonly)
    attn.run(readonly, kv, kv)  # read-only inputs are fine


def test_rejected_run_writes_nothing(planned):
    attn, q, kv = planned
    out = np.full((10, 4, 64), 3.0, np.float16)
    lse = np.full((10, 3), 5.0, np.float32)  # wrong head count
    with pytest.raises(ValueError, match=r"^mlakit: lse: "):
        attn.run(q, kv, kv, out=out, lse=lse)
    assert np.all(out == 3.0) and np.all(lse == 5.0)


def test_bad_stream_argument(planned):
    attn, q, kv = planned
    with pytest.raises(TypeError, match=r"^mlakit: stream: "):
        attn.run(q, kv, kv, stream="default")


def test_run_names_the_config_field():
    """A tensor that disagrees with the config is reported as itself, with the config field."""
    attn = mlakit.RaggedPrefill(16, 16, 192, 128, dtype="bf16", max_batch=1, max_q_tokens=8, max_kv_tokens=8)
    attn.plan([0, 4], [0, 4])
    q, kv = np.zeros((4, 16, 192), np.float16), np.zeros((4, 16, 192), np.float16)
    q15 = np.zeros((4, 15, 192), np.float16)
    attn16 = mlakit.RaggedPrefill(16, 16, 192, 128, dtype="fp16", max_batch=1, max_q_tokens=8, max_kv_tokens=8)
    attn16.plan([0, 4], [0, 4])
    with pytest.raises(ValueError, match=r"^mlakit: q: number of heads 15 differs from config\.num_qo_heads = 16$"):
        attn16.run(q15, kv, np.zeros((4, 16, 128), np.float16))
    # v with the qk head dim (192), out allocated from the config (128): v is the wrong one.
    with pytest.raises(ValueError, match=r"^mlakit: v: head dim 192 differs from config\.head_dim_vo = 128$"):
        attn16.run(q, kv, kv)
    with pytest.raises(TypeError, match=r"^mlakit: q: dtype fp16 differs from config\.dtype bf16$"):
        attn.run(q, kv, np.zeros((4, 16, 128), np.float16))


def test_dir_lists_the_public_api_only():
    public = {n for n in dir(mlakit) if not n.startswith("_")}
    assert public <= set(mlakit.__all__) | {"torch"}, public - set(mlakit.__all__)
    assert set(mlakit.__all__) <= public
    assert "__version__" in dir(mlakit)
    for name in mlakit.__all__:
        assert getattr(mlakit, name) is not None
