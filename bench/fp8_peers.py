"""The FP8 attention peer that bench/compare.py --dtype e4m3 times beside mlakit's FP8 kernel.

Each builder takes the FP8 input sets of compare.fp8_sets (((q8, q_descale), (k8, k_descale),
(v8, v_descale)) per set, one scale per tensor) and returns what compare.py's other builders
return: (run(i), to_ragged(output) -> [total_q, H, Dvo], context manager). A peer that cannot run
a workload raises Skip with the reason; compare.py prints it in the table.

  cudnn_fp8           cuDNN's FP8 SDPA forward (cudnn-frontend's Python graph API,
                      `graph.sdpa_fp8`), dense equal-length batches as compare.py's sdpa_cudnn. On
                      Hopper cuDNN writes an e4m3 output (scale_o sets its range); to_ragged
                      dequantizes it for the check. Needs the `cudnn` package
                      (nvidia-cudnn-frontend, carried as a wheel to the GPU machine).

FlashInfer 0.7.2.post1's fa3 FP8 ragged prefill does not run on the H100 (its e4m3 module fails to
build at (192, 128), and its run() passes the (128, 128) module the wrong arguments), so it is no
peer here (docs/fp8.md).
"""
from __future__ import annotations

import math

FP8_MAX = 448.0
# cuDNN's probabilities are rounded to e4m3 after multiplying by scale_s: 2^8 keeps them in e4m3's
# normal range (the scale mlakit's kernel uses for P).
P_SCALE = 256.0


def _scale(desc):
    """The one scale of a [batch, Hkv] descale tensor built by compare.fp8_sets."""
    return float(desc.reshape(-1)[0])


def build_cudnn_fp8(torch, w, sets8, dev, skip):
    try:
        import cudnn
    except Exception as ex:  # noqa: BLE001
        raise skip(f"cudnn-frontend not importable ({type(ex).__name__}: {ex})")
    if not w.equal_lengths:
        raise skip("ragged lengths (dense SDPA would need padding)")
    B, lq, lk = w.batch, w.q_lens[0], w.kv_lens[0]
    if w.causal and lq != lk:
        raise skip("causal with lq != lk (cuDNN's causal mask aligns top-left)")
    if w.window_left >= 0 or w.kv_heads != w.heads:
        raise skip("window / GQA not wired for the FP8 peer")
    e4m3, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT

    def dense(rows, width):  # [T, H, D] token-major as cuDNN's [B, H, L, D] dims and strides
        return [B, w.heads, rows, width], [rows * w.heads * width, width, w.heads * width, 1]

    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    graph = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=f32, compute_data_type=f32, handle=handle)
    tq = graph.tensor(name="q", dim=dense(lq, w.dqk)[0], stride=dense(lq, w.dqk)[1], data_type=e4m3)
    tk = graph.tensor(name="k", dim=dense(lk, w.dqk)[0], stride=dense(lk, w.dqk)[1], data_type=e4m3)
    tv = graph.tensor(name="v", dim=dense(lk, w.dvo)[0], stride=dense(lk, w.dvo)[1], data_type=e4m3)
    names = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
    ts = {n: graph.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32) for n in names}
    o, _, amax_s, amax_o = graph.sdpa_fp8(q=tq, k=tk, v=tv, **ts, is_inference=True,
                                           attn_scale=1.0 / math.sqrt(w.dqk), use_causal_mask=w.causal,
                                           name="sdpa_fp8")
    o.set_output(True).set_dim(dense(lq, w.dvo)[0]).set_stride(dense(lq, w.dvo)[1]).set_data_type(e4m3)
    for a in (amax_s, amax_o):
        a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    workspace = torch.empty(max(graph.get_workspace_size(), 1), device=dev, dtype=torch.uint8)

    def one(x):
        return torch.full((1, 1, 1, 1), x, device=dev, dtype=torch.float32)

    out = torch.empty(w.total_q, w.heads, w.dvo, device=dev, dtype=torch.float8_e4m3fn)
    amax = [torch.empty(1, 1, 1, 1, device=dev, dtype=torch.float32) for _ in range(2)]
    packs, o_scales = [], []
    for (q, qd), (k, kd), (v, vd) in sets8:
        # The output is a convex combination of V's rows: |o| <= max |v|, so this scale cannot
        # saturate it.
        vmax = FP8_MAX * _scale(vd)
        o_scale = FP8_MAX / max(vmax, 1e-30)
        o_scales.append(o_scale)
        packs.append({tq: q, tk: k, tv: v, o: out, amax_s: amax[0], amax_o: amax[1],
                      ts["descale_q"]: one(_scale(qd)), ts["descale_k"]: one(_scale(kd)),
                      ts["descale_v"]: one(_scale(vd)), ts["descale_s"]: one(1.0 / P_SCALE),
                      ts["scale_s"]: one(P_SCALE), ts["scale_o"]: one(o_scale)})
    last = [0]

    def run(i):
        last[0] = i
        graph.execute(packs[i], workspace, handle=handle)
        return out

    def to_ragged(x):
        return (x.float() / o_scales[last[0]]).to(torch.bfloat16)

    return run, to_ragged, None
