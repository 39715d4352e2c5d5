"""MlaStep on FP8 latent caches with PyTorch CUDA tensors (skipped without a CUDA device): the
step eager and captured with torch.cuda.graph, replayed after re-planning a later step of the
same requests with a new k_scale written into the captured scale tensor; each time the cache
bytes against vLLM's / FlashMLA's quantizers in PyTorch (kv_cache_spec.py) and the output
against the float64 re-creation on the dequantized latents."""

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402

if not torch.cuda.is_available() or mlakit.cuda_device_count() == 0:
    pytest.skip("needs a CUDA device and an mlakit build with CUDA: " +
                (mlakit.cuda_unavailable_reason() or "torch.cuda.is_available() is False"),
                allow_module_level=True)

from kv_cache_spec import BS, DN, DV, R, expected_cache, make_case, reference  # noqa: E402

H, ROWS, G = 16, 30, 160
DEV = torch.device("cuda")


def rel(a, b):
    return float((a.double().cpu() - b).norm() / b.norm())


@pytest.mark.parametrize("cache_dtype", [torch.uint8, torch.float8_e4m3fn], ids=["uint8", "float8_e4m3fn"])
@pytest.mark.parametrize("kind", ["fp8", "fp8_ds_mla"])
def test_graph_replay_after_replan_with_a_new_scale(kind, cache_dtype):
    a = make_case(kind, [20, 1, 9], [0, 37, 70], seed=11, heads=H)
    # A later step of the same requests: request 0's last 5 tokens again (context: what step a wrote),
    # under a new layer scale.
    gen = torch.Generator().manual_seed(12)
    b = dict(a, q_lens=[5, 1, 9], ctx_lens=[15, 37, 70], cache=expected_cache(a),
             k_scale=torch.tensor(0.0411, dtype=torch.float32),
             q=torch.randn(15, H, DN + R, generator=gen).bfloat16(),
             kv_c=torch.randn(15, a["L"], generator=gen).bfloat16(),
             k_pe=torch.randn(15, R, generator=gen).bfloat16())
    step = mlakit.MlaStep(H, a["L"], DN, R, DV, dtype=torch.bfloat16, device="cuda", block_size=BS,
                          num_blocks=a["num_blocks"], max_batch=4, max_tokens=32, max_context_tokens=128,
                          workspace_rows=G, kv_cache_dtype=kind)
    q = torch.zeros(ROWS, H, DN + R, dtype=torch.bfloat16, device=DEV)
    kv_c = torch.zeros(ROWS, a["L"], dtype=torch.bfloat16, device=DEV)
    k_pe = torch.zeros(ROWS, R, dtype=torch.bfloat16, device=DEV)
    w = a["w"].to(DEV)
    cache = a["cache"].to(DEV).view(cache_dtype)
    out = torch.empty(ROWS, H, DV, dtype=torch.bfloat16, device=DEV)
    k_scale = a["k_scale"].to(DEV)  # 0-d, as vLLM's layer._k_scale
    scale_arg = k_scale if kind == "fp8" else None

    def load(c):
        n = sum(c["q_lens"])
        q[:n].copy_(c["q"])
        kv_c[:n].copy_(c["kv_c"])
        k_pe[:n].copy_(c["k_pe"])
        k_scale.copy_(c["k_scale"])
        step.plan(c["q_lens"], c["ctx_lens"], c["bt"], graph_rows=G)

    def check(c):
        torch.cuda.synchronize()
        n = sum(c["q_lens"])
        assert torch.equal(cache.view(torch.uint8).cpu(), expected_cache(c))
        assert not out[:n].isnan().any()
        assert rel(out[:n], reference(c)) < 1e-2

    load(a)
    step.run(q, kv_c, k_pe, w, cache, out=out, k_scale=scale_arg)  # eager
    check(a)
    cache.view(torch.uint8).copy_(a["cache"])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # one-time setup outside the capture
        step.run(q, kv_c, k_pe, w, cache, out=out, k_scale=scale_arg)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step.run(q, kv_c, k_pe, w, cache, out=out, k_scale=scale_arg)
    for c in (a, b):
        if c is a:
            cache.view(torch.uint8).copy_(a["cache"])
        out.fill_(float("nan"))
        load(c)
        g.replay()
        check(c)
