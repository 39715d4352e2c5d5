"""mlakit.info() and the CPU backend's paths from Python: what the build reports, the path a
RaggedPrefill's plan info names, MLAKIT_CPU_ISA forcing a lower path (read at every run), and
every available path's bf16 result against a float64 softmax."""

import itertools
import math

import pytest

import mlakit

torch = pytest.importorskip("torch")

PATHS = ["fp32", "avx512bf16", "amx"]


@pytest.fixture
def isa_env(monkeypatch):
    def set_isa(value):
        if value is None:
            monkeypatch.delenv("MLAKIT_CPU_ISA", raising=False)
        else:
            monkeypatch.setenv("MLAKIT_CPU_ISA", value)
    return set_isa


def test_info_describes_the_build(isa_env):
    isa_env(None)
    info = mlakit.info()
    assert info["version"] == mlakit.__version__
    assert info["built_with_cuda"] == mlakit.built_with_cuda()
    assert info["cpu_isa"] in PATHS and info["cpu_isa"] == info["cpu_isa_best"]
    # amx is the best path exactly where the CPU and OS grant the tiles (a package build never
    # emulates them).
    assert (info["cpu_isa"] == "amx") == info["cpu_has_amx"]
    assert info["cpu_isa_requested"] == ""
    assert isinstance(info["cpu_has_amx"], bool)
    assert info["cpu_products"] == {"bf16": info["cpu_isa"], "fp16": "fp32", "e4m3": info["cpu_isa"]}
    cpu = info["backends"][0]
    assert cpu["name"] == "cpu" and cpu["max_head_dim"] == 512 and cpu["shapes"] == []
    assert cpu["dtypes"] == ["bf16", "fp16", "e4m3"]
    cuda = info["backends"][1:]
    assert bool(cuda) == info["built_with_cuda"]
    for b in cuda:
        assert b["max_head_dim"] is None and ("bf16", 192, 128) in b["shapes"]
        assert set(b["dtypes"]) == {s[0] for s in b["shapes"]}
    latent = info["latent_backends"]
    assert latent[0] == {"name": "cpu", "dtypes": ["bf16", "fp16"], "kv_lora_rank": None, "qk_rope_head_dim": None,
                         "kv_cache_dtypes": ["auto", "fp8", "fp8_ds_mla"]}
    # The Hopper kernel is listed where the build has it (with the sm90 prefill kernels), for
    # DeepSeek's widths only.
    has_sm90 = any(b["name"] == "cuda sm90" for b in info["backends"])
    assert latent[1:] == ([{"name": "cuda sm90", "dtypes": ["bf16", "fp16"], "kv_lora_rank": 512,
                            "qk_rope_head_dim": 64, "kv_cache_dtypes": ["auto", "fp8", "fp8_ds_mla"]}] if has_sm90 else [])
    attn = mlakit.RaggedPrefill(2, 2, 64, 64, dtype="bf16", device="cpu")
    assert attn.info.cpu_isa == info["cpu_isa"]
    assert mlakit.RaggedPrefill(2, 2, 64, 64, dtype="fp16", device="cpu").info.cpu_isa == "fp32"


def test_forced_path_and_bad_value(isa_env):
    isa_env("fp32")
    info = mlakit.info()
    assert info["cpu_isa"] == "fp32" and info["cpu_isa_requested"] == "fp32"
    assert mlakit.RaggedPrefill(2, 2, 64, 64, dtype="bf16", device="cpu").info.cpu_isa == "fp32"
    isa_env("amx")  # where the tiles are missing, the best below it runs
    assert mlakit.info()["cpu_isa"] == mlakit.info()["cpu_isa_best"]
    isa_env("avx9000")
    with pytest.raises(ValueError, match=r"^mlakit: MLAKIT_CPU_ISA: 'avx9000' names no CPU path"):
        mlakit.info()
    with pytest.raises(ValueError, match="MLAKIT_CPU_ISA"):
        mlakit.RaggedPrefill(2, 2, 64, 64, dtype="bf16", device="cpu")


def reference(q, k, v, q_lens, k_lens, causal):
    outs, q0, k0 = [], 0, 0
    for lq, lk in zip(q_lens, k_lens):
        qs, ks, vs = (t.double() for t in (q[q0:q0 + lq], k[k0:k0 + lk], v[k0:k0 + lk]))
        s = torch.einsum("qhd,khd->hqk", qs, ks) / math.sqrt(q.shape[-1])
        if causal:
            keep = torch.arange(lk)[None, :] <= (lk - lq + torch.arange(lq))[:, None]
            s = s.masked_fill(~keep, float("-inf"))
        p = torch.softmax(s, -1).nan_to_num(0.0)
        outs.append(torch.einsum("hqk,khd->qhd", p, vs))
        q0, k0 = q0 + lq, k0 + lk
    return torch.cat(outs)


@pytest.mark.parametrize("path", PATHS)
def test_each_path_matches_float64(isa_env, path):
    isa_env(None)
    if PATHS.index(path) > PATHS.index(mlakit.info()["cpu_isa_best"]):
        pytest.skip(f"the {path} path is not available here (best: {mlakit.info()['cpu_isa_best']})")
    isa_env(path)
    g = torch.Generator().manual_seed(3)
    q_lens, k_lens = [150, 1, 0, 67], [150, 9, 5, 67]
    q = torch.randn(sum(q_lens), 4, 192, generator=g).bfloat16()
    k = torch.randn(sum(k_lens), 2, 192, generator=g).bfloat16()
    v = torch.randn(sum(k_lens), 2, 128, generator=g).bfloat16()
    k_rep, v_rep = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    qi = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32)
    ki = torch.tensor([0, *itertools.accumulate(k_lens)], dtype=torch.int32)
    attn = mlakit.RaggedPrefill(4, 2, 192, 128, dtype="bf16", device="cpu")
    attn.plan(qi, ki, causal=True)
    assert attn.info.cpu_isa == path
    out = attn.run(q, k, v)
    want = reference(q, k_rep, v_rep, q_lens, k_lens, True)
    assert not out.isnan().any()
    assert float((out.double() - want).norm() / want.norm()) < 1e-2
    assert torch.equal(attn.run(q, k, v), out)  # bitwise repeat
