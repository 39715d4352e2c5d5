"""bench/compare.py --dtype e4m3 on the CPU (torch's CPU tensors stand in for CUDA ones): the FP8
inputs it builds from the bf16 sets (float8_e4m3fn with FlashAttention-3's [batch, Hkv]
descales), the float32 reference of their dequantized values, and mlakit's FP8 kernel run the way
build_mlakit_fp8 runs it, checked with the script's own measure and tolerance."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import compare as C  # noqa: E402
import workloads as W  # noqa: E402

import mlakit  # noqa: E402


def test_fp8_sets_reference_and_mlakit_fp8_agree():
    w = W.custom("3x40:3x70")  # causal by default
    cpu = torch.device("cpu")
    sets = C.make_sets(torch, w, 2, cpu, 5)
    sets8, deq = C.fp8_sets(torch, w, sets)
    assert len(sets8) == 2
    for x8, d in sets8[0]:
        assert x8.dtype == torch.float8_e4m3fn and d.shape == (w.batch, w.kv_heads) and d.dtype == torch.float32
        assert float(x8.float().abs().max()) <= 448.0
    rows, heads = C.sample_rows(w, 16, 1), C.check_heads(w)
    ref8 = C.reference(torch, w, *deq, rows, heads)
    ref = C.reference(torch, w, *sets[0], rows, heads)
    # mlakit's FP8 path (the CPU backend here), run as build_mlakit_fp8 runs it.
    p = mlakit.RaggedPrefill(w.heads, w.kv_heads, w.dqk, w.dvo, dtype="e4m3", out_dtype="bf16", max_batch=w.batch,
                             max_q_tokens=w.total_q, max_kv_tokens=w.total_kv, device="cpu")
    p.plan(torch.tensor(w.qo_indptr(), dtype=torch.int32), torch.tensor(w.kv_indptr(), dtype=torch.int32),
           causal=w.causal)
    (q, qd), (k, kd), (v, vd) = sets8[0]
    out = p.run(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd)
    assert out.dtype == torch.bfloat16
    err = C.relerr(torch, out, ref8, rows, heads)
    assert err <= C.FP8_TOL["mlakit_fp8"], err
    assert C.relerr(torch, out, ref, rows, heads) < 0.2  # the same attention as the bf16 inputs'


def test_e4m3_adds_mlakit_fp8_and_the_fp8_peer_of_the_bf16_methods_asked_for():
    assert C.select_methods("mlakit,flashinfer_fa3,sdpa_cudnn", "e4m3", False) == [
        "mlakit", "flashinfer_fa3", "sdpa_cudnn", "mlakit_fp8", "cudnn_fp8"]
    assert C.select_methods("mlakit", "e4m3", False) == ["mlakit", "mlakit_fp8"]
    assert C.select_methods("mlakit,sdpa_cudnn", "bf16", False) == ["mlakit", "sdpa_cudnn"]
    assert "flex_attention" not in C.select_methods(None, "bf16", True)
    assert set(C.FP8_TOL) <= set(C.ALL_METHODS + C.EXTRA_METHODS)
