"""Per-call cost of attention entry points from Python (issue 8), used by bench/compare.py.

For each entry point, on one small problem (1x999 by default, where the host cost matters most):
  device_us     the kernel(s) of one call: CUDA events around each call, median, with a spin kernel
                (torch.cuda._sleep) queued first so the host is always ahead of the device and the
                events time the device work only, not the launch gaps
  host_us       how long the call takes to return to Python (the device kept busy by the spin
                kernel, so no launch waits for it): the host cost an engine pays per call
  sync_wall_us  synchronize, call, synchronize: median wall time of one call
  overhead_us   sync_wall_us - device_us: what a caller waits for beyond the kernel itself
Every entry point's output is checked against the first one that ran (mlakit's run()).
"""
from __future__ import annotations

import math
import statistics
import time
import traceback

SPIN_CYCLES = 20_000_000


def short(ex, limit=300):
    """One line of an exception for tables and JSON (some carry pages of dispatcher text)."""
    text = f"{type(ex).__name__}: {ex}".strip().splitlines()[0] if str(ex).strip() else type(ex).__name__
    return text if len(text) <= limit else text[:limit] + " ..."
  # ~10 ms at H200 clocks: room to enqueue the calls behind it


def _spin(torch):
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return False
    sleep(SPIN_CYCLES)
    return True


def measure(torch, fn, iters=50, warmup=5):
    """{device_us, host_us, sync_wall_us, overhead_us, spin} for fn() (one call = one launch set)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    # Device time, host ahead of the device.
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    spun = _spin(torch)
    for i in range(iters):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    device_us = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3
    # Host time until the call returns, device busy.
    host = []
    _spin(torch)
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    # Synchronized wall time of one call.
    wall = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e6)
    sync_wall_us = statistics.median(wall)
    return {"device_us": device_us, "host_us": statistics.median(host), "sync_wall_us": sync_wall_us,
            "overhead_us": sync_wall_us - device_us, "spin": spun}


def entry_points(torch, w, mlakit_mod, fi_mod, fi_workspace):
    """[(name, fn, to_out, why_skipped)] for the workload w (q, k, v made here)."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev)
    g.manual_seed(4321)
    q = torch.randn(w.total_q, w.heads, w.dqk, device=dev, dtype=torch.bfloat16, generator=g)
    k = torch.randn(w.total_kv, w.kv_heads, w.dqk, device=dev, dtype=torch.bfloat16, generator=g)
    v = torch.randn(w.total_kv, w.kv_heads, w.dvo, device=dev, dtype=torch.bfloat16, generator=g)
    scale = 1.0 / math.sqrt(w.dqk)
    qo_h = torch.tensor(w.qo_indptr(), dtype=torch.int32)
    kv_h = torch.tensor(w.kv_indptr(), dtype=torch.int32)
    qo_d, kv_d = qo_h.to(dev), kv_h.to(dev)
    max_q, max_k = max(w.q_lens), max(w.kv_lens)
    out = []

    def add(name, make):
        try:
            fn, to_out = make()
            out.append((name, fn, to_out, None))
        except Exception as ex:  # noqa: BLE001
            out.append((name, None, None, short(ex)))

    def mk_mlakit_run():
        if mlakit_mod is None:
            raise RuntimeError("mlakit binding not importable")
        p = mlakit_mod.RaggedPrefill(num_qo_heads=w.heads, num_kv_heads=w.kv_heads, head_dim_qk=w.dqk,
                                     head_dim_vo=w.dvo, dtype=torch.bfloat16, device="cuda",
                                     max_batch=w.batch, max_q_tokens=w.total_q, max_kv_tokens=w.total_kv)
        p.plan(qo_h, kv_h, causal=w.causal)
        o = torch.empty(w.total_q, w.heads, w.dvo, device=dev, dtype=torch.bfloat16)
        mk_mlakit_run.plan = p
        return (lambda: p.run(q, k, v, out=o)), (lambda: o)

    def mk_mlakit_op():
        import mlakit.torch  # noqa: F401  (registers torch.ops.mlakit)
        p = getattr(mk_mlakit_run, "plan", None)
        if p is None:
            raise RuntimeError("needs the RaggedPrefill of the previous entry")
        res = {}

        def fn():
            res["o"] = torch.ops.mlakit.ragged_prefill(q, k, v, p.handle)
        return fn, (lambda: res["o"])

    def mk_mlakit_fa_varlen(cu_q, cu_k):
        def make():
            if mlakit_mod is None:
                raise RuntimeError("mlakit binding not importable")
            import mlakit.torch as mt
            f = getattr(mt, "flash_attn_varlen_func", None)
            if f is None:
                raise RuntimeError("mlakit.torch has no flash_attn_varlen_func yet (issue 8, in progress)")
            res = {}

            def fn():
                res["o"] = f(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=scale, causal=w.causal)
            return fn, (lambda: res["o"][0] if isinstance(res["o"], tuple) else res["o"])
        return make

    def mk_fa2(pre_padded):
        def make():
            vp = torch.nn.functional.pad(v, (0, w.dqk - w.dvo))
            res = {}

            def fn():
                vv = vp if pre_padded else torch.nn.functional.pad(v, (0, w.dqk - w.dvo))
                res["o"] = torch.ops.aten._flash_attention_forward(
                    q, k, vv, qo_d, kv_d, max_q, max_k, 0.0, w.causal, False, scale=scale)[0]
            return fn, (lambda: res["o"][..., :w.dvo])
        return make

    def mk_fi(backend):
        def make():
            if fi_mod is None:
                raise RuntimeError("flashinfer not importable")
            from flashinfer.prefill import BatchPrefillWithRaggedKVCacheWrapper
            wr = BatchPrefillWithRaggedKVCacheWrapper(fi_workspace(), "NHD", backend=backend)
            wr.plan(qo_d, kv_d, w.heads, w.kv_heads, w.dqk, head_dim_vo=w.dvo, causal=w.causal,
                    sm_scale=scale, q_data_type=torch.bfloat16)
            res = {}

            def fn():
                res["o"] = wr.run(q, k, v)
            return fn, (lambda: res["o"])
        return make

    add("mlakit RaggedPrefill.run (out= given)", mk_mlakit_run)
    add("mlakit.torch op ragged_prefill", mk_mlakit_op)
    add("mlakit.torch.flash_attn_varlen_func (device cu_seqlens)", mk_mlakit_fa_varlen(qo_d, kv_d))
    add("mlakit.torch.flash_attn_varlen_func (host cu_seqlens)", mk_mlakit_fa_varlen(qo_h, kv_h))
    add("FA2 _flash_attention_forward (V pre-padded)", mk_fa2(True))
    add("FA2 _flash_attention_forward + V pad (as timed)", mk_fa2(False))
    add("FlashInfer fa3 run()", mk_fi("fa3"))
    return out


def run_overheads(torch, w, mlakit_mod, fi_mod, fi_workspace, iters, log):
    """Measures every entry point; prints a table; returns the JSON-ready list."""
    rows = []
    ref = None
    for name, fn, to_out, why in entry_points(torch, w, mlakit_mod, fi_mod, fi_workspace):
        if fn is None:
            log(f"  overhead: {name}: skipped ({why})")
            rows.append({"entry": name, "skipped": why})
            continue
        try:
            fn()
            torch.cuda.synchronize()
            o = to_out().float()
            err = None
            if ref is None:
                ref = o
            else:
                err = float(((o - ref).abs().amax() / ref.abs().amax().clamp_min(1e-30)).item())
            r = measure(torch, fn, iters=iters)
            r.update({"entry": name, "relerr_vs_first": err})
            rows.append(r)
        except Exception as ex:  # noqa: BLE001
            log(f"  overhead: {name}: failed: {short(ex)}")
            traceback.print_exc(limit=3)
            rows.append({"entry": name, "skipped": f"error: {short(ex)}"})
        torch.cuda.synchronize()
    log("")
    log(f"Per-call cost from Python at {w.name} (µs; median of {iters}; overhead = sync wall - device)")
    log(f"  {'entry point':58s} {'device':>8s} {'host':>8s} {'sync wall':>10s} {'overhead':>9s} {'err':>8s}")
    for r in rows:
        if "skipped" in r:
            log(f"  {r['entry']:58s} skipped: {r['skipped']}")
            continue
        e = r.get("relerr_vs_first")
        log(f"  {r['entry']:58s} {r['device_us']:8.1f} {r['host_us']:8.1f} {r['sync_wall_us']:10.1f} "
            f"{r['overhead_us']:9.1f} {('%.1e' % e) if e is not None else '(ref)':>8s}")
    by = {r["entry"]: r for r in rows if "skipped" not in r}
    fa2 = by.get("FA2 _flash_attention_forward (V pre-padded)")
    for name in ("mlakit RaggedPrefill.run (out= given)", "mlakit.torch.flash_attn_varlen_func (device cu_seqlens)"):
        if fa2 and name in by:  # issue 8's target: no more per-call overhead than FA2's
            d = by[name]["overhead_us"] - fa2["overhead_us"]
            log(f"  {name}: overhead {by[name]['overhead_us']:.1f} µs vs FA2's {fa2['overhead_us']:.1f} µs "
                f"({'within' if d <= 0 else f'{d:.1f} µs over'} FA2's)")
    if rows and not any(r.get("spin") for r in rows if "skipped" not in r):
        log("  (torch.cuda._sleep missing: device times include launch gaps)")
    return rows
