"""MlaStep on FP8 latent caches through the Python binding, CPU backend, torch tensors:
``kv_cache_dtype="fp8"`` (vLLM's, a 0-d float32 ``k_scale`` as vLLM's ``layer._k_scale``) and
``"fp8_ds_mla"`` (DeepSeek-V3.2's 656-byte rows), caches as uint8 (vLLM's allocation) or
float8_e4m3fn: the cache bytes after a step against vLLM's and FlashMLA's quantizers written
in PyTorch (kv_cache_spec.py), the output against a float64 re-creation on the dequantized
latents, the custom op, and errors naming the argument."""

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402
import mlakit.torch as mt  # noqa: E402

from kv_cache_spec import BS, DN, DV, R, expected_cache, make_case, reference  # noqa: E402

H = 2


def make_step(c, workspace_rows=0, **kw):
    kw.setdefault("absorb_max_query_len", 0)  # the up-projection path (chunks); absorbed: test_mla_cpu.py
    return mlakit.MlaStep(H, c["L"], DN, R, DV, dtype=torch.bfloat16, device="cpu", block_size=BS,
                          num_blocks=c["num_blocks"], max_batch=4, max_tokens=32, max_context_tokens=128,
                          workspace_rows=workspace_rows, kv_cache_dtype=c["kind"], **kw)


def rel(a, b):
    return float((a.double() - b).norm() / b.norm())


@pytest.mark.parametrize("workspace_rows", [0, 48], ids=["one_launch", "chunks"])
@pytest.mark.parametrize("cache_dtype", [torch.uint8, torch.float8_e4m3fn], ids=["uint8", "float8_e4m3fn"])
@pytest.mark.parametrize("kind", ["fp8", "fp8_ds_mla"])
def test_step_writes_the_format_and_matches_the_reference(kind, cache_dtype, workspace_rows):
    c = make_case(kind, [20, 1, 9], [0, 37, 70], seed=3, heads=H)
    step = make_step(c, workspace_rows)
    assert step.kv_cache_dtype == kind
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    assert step.info.chunked == (workspace_rows > 0)
    cache = c["cache"].clone().view(cache_dtype)
    out = step.run(c["q"], c["kv_c"], c["k_pe"], c["w"], cache, k_scale=c["k_scale"] if kind == "fp8" else None)
    assert torch.equal(cache.view(torch.uint8), expected_cache(c))  # vLLM's / FlashMLA's bytes
    assert not out.isnan().any()
    assert rel(out, reference(c)) < 1e-2


def test_custom_op_takes_the_scale():
    c = make_case("fp8", [7, 4], [5, 0], seed=5, heads=H)
    step = make_step(c)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    cache = c["cache"].clone()
    out = torch.empty(11, H, DV, dtype=torch.bfloat16)
    mt.mla_step_out(step, c["q"], c["kv_c"], c["k_pe"], c["w"], cache, out, None, c["k_scale"].reshape(1))
    assert torch.equal(cache, expected_cache(c))
    assert rel(out, reference(c)) < 1e-2


def test_kv_cache_dtype_names_and_errors():
    c = make_case("fp8", [3], [2], seed=7, heads=H)
    for alias in ("fp8", "fp8_e4m3", "FP8", torch.float8_e4m3fn):
        assert make_step(dict(c, kind=alias)).kv_cache_dtype == "fp8"
    assert make_step(dict(c, kind="auto")).kv_cache_dtype == "auto"
    with pytest.raises(ValueError, match=r"^mlakit: kv_cache_dtype: must be 'auto', 'fp8'"):
        make_step(dict(c, kind="int4"))
    with pytest.raises(ValueError, match=r"^mlakit: kv_cache_dtype: e5m2"):
        make_step(dict(c, kind="fp8_e5m2"))
    # fp8_ds_mla: DeepSeek-V3.2's 512 + 64 in bf16 only.
    with pytest.raises(ValueError, match=r"^mlakit: config\.kv_lora_rank: .*fp8_ds_mla"):
        make_step(dict(c, kind="fp8_ds_mla"))
    with pytest.raises(ValueError, match=r"^mlakit: config\.dtype: .*bf16"):
        mlakit.MlaStep(H, 512, DN, R, DV, dtype=torch.float16, device="cpu", num_blocks=4, max_batch=1,
                       max_tokens=8, kv_cache_dtype="fp8_ds_mla")
    host, dev = mlakit._C.MlaStep.workspace_sizes(H, 64, DN, R, DV, "bf16", BS, 4, 1, 8, 8, 0, "cpu", False, "fp8")
    assert host > 0 and dev > 0

    step = make_step(c)
    step.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    cache = c["cache"].clone()
    before = cache.clone()
    args = (c["q"], c["kv_c"], c["k_pe"], c["w"])
    with pytest.raises(ValueError, match=r"^mlakit: k_scale: kv_cache_dtype fp8 needs"):
        step.run(*args, cache)
    with pytest.raises(TypeError, match=r"^mlakit: k_scale: dtype fp64 must be fp32"):
        step.run(*args, cache, k_scale=c["k_scale"].double())
    with pytest.raises(ValueError, match=r"^mlakit: k_scale: must hold one element"):
        step.run(*args, cache, k_scale=torch.ones(2))
    with pytest.raises(TypeError, match=r"^mlakit: kv_cache: dtype bf16 must be e4m3 or uint8"):
        step.run(*args, cache.bfloat16(), k_scale=c["k_scale"])
    with pytest.raises(ValueError, match=r"^mlakit: kv_cache: shape"):
        step.run(*args, torch.zeros(c["num_blocks"], BS, 656, dtype=torch.uint8), k_scale=c["k_scale"])
    assert torch.equal(cache, before)  # nothing written
    auto = make_step(dict(c, kind="auto"))
    auto.plan(c["q_lens"], c["ctx_lens"], c["bt"])
    with pytest.raises(TypeError, match=r"^mlakit: k_scale: only kv_cache_dtype fp8 takes"):
        auto.run(*args, torch.zeros(c["num_blocks"], BS, 64 + R, dtype=torch.bfloat16), k_scale=c["k_scale"])
