"""Per-call cost of attention entry points from Python, used by bench/compare.py.

For each entry point, on one small problem (1x999 by default, where the host cost matters most):
  device_us     CUDA events around each call, median, with a spin kernel (torch.cuda._sleep)
                queued first so the host is always ahead of the device and the events time the
                device work only, not the launch gaps. A call that synchronizes (reads the device
                back) drains that queue: its events then span the host's wait too, so device_us
                is not its kernel time
  kernel_us     the kernel time the call pays for: for mlakit's rows the device_us of
                RaggedPrefill.run (every mlakit row launches that kernel on the same plan), for
                the others their own device_us
  host_us       how long the call takes to return to Python (the device kept busy by the spin
                kernel, so no launch waits for it): the host cost an engine pays per call
  sync_wall_us  synchronize, call, synchronize: median wall time of one call
  overhead_us   sync_wall_us - kernel_us: what a caller waits for beyond the kernel itself
                (for calls that do not synchronize, kernel_us = device_us as before; for the
                read-back row it shows the read-back's real cost)
Every entry point's output is checked against the first one that ran (mlakit's run()).

Without a GPU, `python3 bench/overhead.py --cpu` times the host cost of the mlakit entry points
on a one-token CPU problem (see cpu_host_costs).
"""
from __future__ import annotations

import math
import statistics
import time
import traceback

SPIN_CYCLES = 20_000_000  # ~10 ms at H200 clocks: room to enqueue the calls behind it

RUN = "mlakit RaggedPrefill.run (out= given)"
NATIVE = "mlakit native run (descriptors prebuilt)"
OP = "mlakit.torch op ragged_prefill"
HELPER = "mlakit.torch.ragged_prefill (eager helper)"
FA_DEV = "mlakit.torch.flash_attn_varlen_func (device cu_seqlens)"
FA_READ = "mlakit.torch.flash_attn_varlen_func (device cu_seqlens, read back)"
FA_COPIES = "mlakit.torch.flash_attn_varlen_func (device cu + host copies)"
FA_HOST = "mlakit.torch.flash_attn_varlen_func (host cu_seqlens)"
FA2 = "FA2 _flash_attention_forward (V pre-padded)"


def short(ex, limit=300):
    """One line of an exception for tables and JSON (some carry pages of dispatcher text)."""
    text = f"{type(ex).__name__}: {ex}".strip().splitlines()[0] if str(ex).strip() else type(ex).__name__
    return text if len(text) <= limit else text[:limit] + " ..."


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

    def mk_mlakit_native():
        # The extension's launch alone (descriptors built once): the floor under every row.
        p = getattr(mk_mlakit_run, "plan", None)
        if p is None or not hasattr(mlakit_mod, "_torch_descriptor"):
            raise RuntimeError("needs the RaggedPrefill of the first entry and mlakit._torch_descriptor")
        o = torch.empty(w.total_q, w.heads, w.dvo, device=dev, dtype=torch.bfloat16)
        args = [mlakit_mod._torch_descriptor(t) for t in (q, k, v, o)]
        stream = torch.cuda.current_stream().cuda_stream
        return (lambda: p._impl.run(*args, None, stream)), (lambda: o)

    def mk_mlakit_op(helper):
        def make():
            import mlakit.torch as mt  # registers torch.ops.mlakit
            p = getattr(mk_mlakit_run, "plan", None)
            if p is None:
                raise RuntimeError("needs the RaggedPrefill of the first entry")
            res = {}

            def fn():
                if helper:
                    res["o"] = mt.ragged_prefill(p, q, k, v)
                else:
                    res["o"] = torch.ops.mlakit.ragged_prefill(q, k, v, p.handle)
            return fn, (lambda: res["o"])
        return make

    def mk_mlakit_fa_varlen(cu_q, cu_k, host=None, read_back=False):
        def make():
            if mlakit_mod is None:
                raise RuntimeError("mlakit binding not importable")
            import mlakit.torch as mt
            f = getattr(mt, "flash_attn_varlen_func", None)
            if f is None:
                raise RuntimeError("this mlakit.torch has no flash_attn_varlen_func")
            trust = getattr(mt, "varlen_trust_version", None)
            if read_back and trust is None:
                raise RuntimeError("this mlakit reads device cu_seqlens back on every call: see the row above")
            kw = {} if host is None else dict(cu_seqlens_q_cpu=host[0], cu_seqlens_k_cpu=host[1])
            res = {}

            def call():
                res["o"] = f(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=scale, causal=w.causal, **kw)

            def fn_read_back():
                # As when the offsets change every call (or are written behind PyTorch's back):
                # the version-counter rule off, so the call reads them back.
                old = trust(False)
                try:
                    call()
                finally:
                    trust(old)
            return (fn_read_back if read_back else call), (lambda: res["o"])
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

    add(RUN, mk_mlakit_run)
    add(NATIVE, mk_mlakit_native)
    add(OP, mk_mlakit_op(False))
    add(HELPER, mk_mlakit_op(True))
    add(FA_DEV, mk_mlakit_fa_varlen(qo_d, kv_d))
    add(FA_READ, mk_mlakit_fa_varlen(qo_d, kv_d, read_back=True))
    add(FA_COPIES, mk_mlakit_fa_varlen(qo_d, kv_d, host=(qo_h, kv_h)))
    add(FA_HOST, mk_mlakit_fa_varlen(qo_h, kv_h))
    add(FA2, mk_fa2(True))
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
    report(rows, w.name, iters, log)
    return rows


def report(rows, workload, iters, log):
    """Sets kernel_us / overhead_us of the measured rows and prints the table."""
    by = {r["entry"]: r for r in rows if "skipped" not in r}
    run_kernel = by[RUN]["device_us"] if RUN in by else None
    for r in by.values():
        # Every mlakit row launches RaggedPrefill.run's kernel on the same plan; a row that
        # synchronizes has a device_us that includes the host's wait (see the docstring).
        own = r["device_us"]
        r["kernel_us"] = run_kernel if r["entry"].startswith("mlakit") and run_kernel is not None else own
        r["overhead_us"] = r["sync_wall_us"] - r["kernel_us"]
    log("")
    log(f"Per-call cost from Python at {workload} (µs; median of {iters}; overhead = sync wall - kernel, "
        f"kernel = RaggedPrefill.run's device time for mlakit's rows)")
    log(f"  {'entry point':68s} {'device':>7s} {'kernel':>7s} {'host':>7s} {'sync wall':>9s} {'overhead':>8s} "
        f"{'err':>8s}")
    for r in rows:
        if "skipped" in r:
            log(f"  {r['entry']:68s} skipped: {r['skipped']}")
            continue
        e = r.get("relerr_vs_first")
        log(f"  {r['entry']:68s} {r['device_us']:7.1f} {r['kernel_us']:7.1f} {r['host_us']:7.1f} "
            f"{r['sync_wall_us']:9.1f} {r['overhead_us']:8.1f} {('%.1e' % e) if e is not None else '(ref)':>8s}")
    fa2 = by.get(FA2)
    for name in (RUN, FA_DEV, FA_COPIES, FA_HOST, FA_READ):
        if fa2 and name in by:  # the target: no more per-call overhead than FA2's
            d = by[name]["overhead_us"] - fa2["overhead_us"]
            log(f"  {name}: overhead {by[name]['overhead_us']:.1f} µs vs FA2's {fa2['overhead_us']:.1f} µs "
                f"({'within' if d <= 0 else f'{d:.1f} µs over'} FA2's); sync wall {by[name]['sync_wall_us']:.1f} "
                f"vs {fa2['sync_wall_us']:.1f}")
    line = host_breakdown({n: r["host_us"] for n, r in by.items()})
    if line:
        log("  " + line)
    if rows and not any(r.get("spin") for r in rows if "skipped" not in r):
        log("  (torch.cuda._sleep missing: device times include launch gaps)")


def host_breakdown(host):
    """One line: where an entry point's host time goes, as differences of the rows' host times
    (native launch; RaggedPrefill.run's Python wrapper; the drop-in's checks, plan check and
    out allocation; the custom-op dispatch). None when the rows are missing."""
    if NATIVE not in host or RUN not in host:
        return None
    parts = [f"native launch {host[NATIVE]:.1f}", f"run() wrapper +{host[RUN] - host[NATIVE]:.1f}"]
    if FA_HOST in host:
        parts.append(f"flash_attn_varlen_func (host cu) +{host[FA_HOST] - host[RUN]:.1f} over run()")
    if FA_COPIES in host:
        parts.append(f"(device cu + host copies) +{host[FA_COPIES] - host[RUN]:.1f}")
    if OP in host:
        parts.append(f"torch.ops dispatch +{host[OP] - host.get(HELPER, host[RUN]):.1f}"
                     + (" over the eager helper" if HELPER in host else " over run()"))
    return "host µs per call: " + "; ".join(parts)


def cpu_host_costs(torch, mlakit_mod, calls=2000, repeats=7, log=print):
    """Host µs per call of the mlakit entry points, without a GPU: a one-token CPU problem (one
    head of 64), where the CPU kernel is about a microsecond, so each row is the Python and
    dispatch cost plus that floor (the native row). Best of `repeats` loops of `calls` calls
    (noise on a shared machine only adds). The CUDA launch itself (a few µs) is not in these.
    The CUDA-offsets rows run on CPU offsets that report is_cuda (see OnCuda below)."""
    import mlakit.torch as mt
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 64).bfloat16() for _ in range(3))
    o = torch.empty(1, 1, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 1], dtype=torch.int32)
    cu100 = torch.tensor([0] * 100 + [1], dtype=torch.int32)  # 99 empty sequences, one token
    p = mlakit_mod.RaggedPrefill(1, 1, 64, 64, dtype=torch.bfloat16, max_batch=1, max_q_tokens=1, max_kv_tokens=1)
    p.plan(cu, cu, causal=True)
    args = [mlakit_mod._torch_descriptor(t) for t in (q, k, v, o)]
    f = mt.flash_attn_varlen_func

    class OnCuda(torch.Tensor):
        """CPU offsets that report is_cuda: flash_attn_varlen_func's branches for CUDA offsets
        (plans keyed by address, the version-counter rule) without a GPU. Attribute reads skip
        __torch_function__ but, being a subclass, still cost a little more than a plain tensor's."""
        __torch_function__ = torch._C._disabled_torch_function_impl

        @property
        def is_cuda(self):
            return True

    cu_q, cu_k = torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0, 1], dtype=torch.int32)
    dev_q, dev_k = cu_q.clone().as_subclass(OnCuda), cu_k.clone().as_subclass(OnCuda)
    # The first call gives host copies (a CPU machine cannot read CUDA offsets back); the plan it
    # makes also records the offsets for the version-counter rule, which the next calls use.
    f(q, k, v, dev_q, dev_k, 1, 1, causal=True, cu_seqlens_q_cpu=cu_q, cu_seqlens_k_cpu=cu_k)
    rows = [
        (NATIVE, lambda: p._impl.run(*args, None, 0)),
        (RUN, lambda: p.run(q, k, v, out=o)),
        (OP, lambda: torch.ops.mlakit.ragged_prefill(q, k, v, p.handle)),
        (HELPER, lambda: mt.ragged_prefill(p, q, k, v)),
        (FA_HOST, lambda: f(q, k, v, cu, cu, 1, 1, causal=True)),
        (FA_HOST + ", out=", lambda: f(q, k, v, cu, cu, 1, 1, causal=True, out=o)),
        (FA_HOST + ", lse", lambda: f(q, k, v, cu, cu, 1, 1, causal=True, return_softmax_lse=True)),
        (FA_HOST + ", batch 100", lambda: f(q, k, v, cu100, cu100, 1, 1, causal=True, out=o)),
        (FA_DEV + " (CPU stand-in)", lambda: f(q, k, v, dev_q, dev_k, 1, 1, causal=True)),
        (FA_COPIES + " (stand-in)", lambda: f(q, k, v, dev_q, dev_k, 1, 1, causal=True, cu_seqlens_q_cpu=cu_q,
                                              cu_seqlens_k_cpu=cu_k)),
    ]
    host = {}
    log(f"Host cost per call on the CPU (µs; best of {repeats} x {calls} calls; one token, H=1, D=64)")
    log(f"  {'entry point':72s} {'host':>7s} {'- native':>8s}")
    for name, fn in rows:
        try:
            for _ in range(200):
                fn()
            best = math.inf
            for _ in range(repeats):
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        except Exception as ex:  # noqa: BLE001
            log(f"  {name:72s} failed: {short(ex)}")
            continue
        host[name] = best
        log(f"  {name:72s} {best:7.2f} {best - host.get(NATIVE, best):8.2f}")
    line = host_breakdown(host)
    if line:
        log("  " + line)
    return host


if __name__ == "__main__":
    import argparse
    import sys

    ap = argparse.ArgumentParser(description="Per-call host cost of mlakit's Python entry points on the CPU "
                                             "(the GPU table is printed by bench/compare.py --overhead).")
    ap.add_argument("--cpu", action="store_true", required=True, help="time on the CPU (the only mode here)")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    import torch as _torch

    import mlakit as _mlakit
    _torch.set_num_threads(1)
    cpu_host_costs(_torch, _mlakit, a.calls, a.repeats)
    sys.exit(0)
