"""bench/compare_mla.py's --kv-cache-dtypes: the mlakit step paths expanded once per latent cache
format (<path>@<format>, right after the path), the names it accepts, the cache rows' bytes, and
the latents the reference takes for a path on an FP8 cache (the formats' round trip)."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import mla_model as M  # noqa: E402
import mla_paths as P  # noqa: E402


def test_step_paths_run_once_per_format():
    names = P.with_kv_cache_dtypes(["fa2_vllm", "mlakit_step", "mlakit_step_graph"], ["auto", "fp8", "fp8_ds_mla"])
    assert names == ["fa2_vllm", "mlakit_step", "mlakit_step@fp8", "mlakit_step@fp8_ds_mla", "mlakit_step_graph",
                     "mlakit_step_graph@fp8", "mlakit_step_graph@fp8_ds_mla"]
    assert P.with_kv_cache_dtypes(["mlakit_step_graph"], ["fp8"]) == ["mlakit_step_graph@fp8"]
    assert all(P.is_path_name(n) for n in names)
    for bad in ("fa2_vllm@fp8", "mlakit_step@int4", "mlakit_kernel_in_vllm_path@fp8", "nope"):
        assert not P.is_path_name(bad)


def test_rows_and_round_trip():
    cfg = M.MLAConfig()
    assert [M.cache_row_bytes(cfg, k) for k in M.KV_CACHE_DTYPES] == [1152, 576, 656]
    g = torch.Generator().manual_seed(0)
    kv_c = torch.randn(9, 512, generator=g).bfloat16()
    k_pe = torch.randn(9, 64, generator=g).bfloat16()
    kv_c[0, :128] = 0  # an all-zero tile stays zero
    for kind in ("fp8", "fp8_ds_mla"):
        c, p = M.through_cache(kv_c, k_pe, kind)
        assert c.dtype == kv_c.dtype and c.shape == kv_c.shape and p.shape == k_pe.shape
        assert torch.equal(c[0, :128], kv_c[0, :128])
        err = ((c.float() - kv_c.float()).norm() / kv_c.float().norm()).item()
        assert 1e-3 < err < 5e-2  # e4m3's rounding, nothing more
        c2, p2 = M.through_cache(c, p, kind)  # the cache's values are the cache's values
        assert torch.equal(c2, c) and torch.equal(p2, p)
    assert torch.equal(M.through_cache(kv_c, k_pe, "fp8_ds_mla")[1], k_pe)  # RoPE kept in bf16
