#!/usr/bin/env python3
"""mlakit's LatentAttention (latent-space / absorbed MLA over the paged latent cache) beside FlashMLA,
FlashInfer's MLA wrapper and a PyTorch floor, timed alike in one process on a GPU.

Workloads (bench/latent_workloads.py; bf16, one 576-wide latent cache paged at 64 rows a block
through a shuffled block table, sm_scale 192^-0.5):
  decode    decode_h16/h128: 128 requests x 1 new token over 4096 cached tokens;
            ragged_h16/h128: 128 contexts uniform in 512-8192 (fixed seed)
  mtp       mtp2/mtp4 (64 requests), extend64 (16), extend128 (8) new tokens over 4096, causal
            among them; 16 and 128 heads
  sparse    sparse_h128/h64/h32/h16: one request of 4096 query tokens over 32768 cached tokens,
            each naming 2048 of its causal-visible positions (DSA)
  fp8       on DeepSeek-V3.2's fp8_ds_mla cache (656-byte rows): fp8_decode_h128/h64/h16, 128
            requests x 2 new tokens over 8192 cached tokens, top-k 2048 (FlashMLA's FP8 sparse
            decode figure); fp8_sparse_h128/h64, the sparse prefill above; on vLLM's fp8 cache (one
            scale a layer): fp8_dense_decode_h16/h128, decode_h16/h128's batch; fp8_ds_decode_h128,
            fp8_mtp2_h128, fp8_mtp4_h128 and fp8_extend64_h128: decode_h128, mtp2_h128, mtp4_h128
            and extend64_h128 on the fp8_ds_mla cache (each row read 2, 4, 8, 128 times)
Methods (bench/latent_peers.py says how each peer is called; a method that cannot run or fails is
reported as skipped with its reason and the run goes on):
  mlakit              LatentAttention planned once per workload, run() timed (sparse: positions)
  mlakit_slots        sparse workloads: the same with global cache slots (FlashMLA's indices)
  mlakit_bf16         fp8 workloads: mlakit on the bf16 cache the FP8 rows decode to (what the FP8
                      cache costs against the bf16 one)
  mlakit_decoded      fp8 workloads: mlakit with a workspace for the workload's rows
                      (max_decoded_rows) and fp8_decode="once": the rows decoded once per run, then
                      the kernel over bf16 rows (`mlakit` decodes them in its stages)
  flashmla            flash_mla_with_kvcache (dense), schedule computed before timing
  flashmla_sparse     flash_mla_sparse_fwd (16 / 32 heads padded to 64, as vLLM pads; fp8 workloads:
                      on the decoded bf16 cache, vLLM's path after it up-converts the rows)
  flashmla_fp8        fp8 workloads: FlashMLA's FP8 sparse decode kernel on the fp8_ds_mla cache
  flashinfer_fa3_p16, flashinfer_fa3_p1, flashinfer_fa2_p16, flashinfer_fa2_p1
                      BatchMLAPagedAttentionWrapper, backend and page size (any flashinfer_<b>_p<P>
                      with P dividing 64 is accepted); planned before timing
  torch_sdpa, torch_matmul   the PyTorch floor: page gather + SDPA / matmul-softmax-matmul
  aliases: torch (both floors), flashinfer (the four), peers (every method but mlakit's)
Measured: median ms of --iters CUDA-event-timed calls issued back to back after --warmup calls;
TFLOP/s (2 * (576 + 512) * H per visible (token, key) pair); GB/s (latent rows read, 1152 B per
distinct row per request); vs mlakit = this method's ms / mlakit's (> 1: mlakit faster); the
fractions of this run's bf16 matmul ceiling (8192^3) and device-to-device copy bandwidth
(bench/ceilings.py); plan() host cost (mlakit, FlashInfer: median host wall of --plan-iters
calls, device idle before each). Every method's output is checked against a float32 reference
computed on the device for sampled query tokens, all heads: max over (token, head) of
max|o - r| / max|r|; a NaN fails.

  python3 bench/compare_latent.py --json compare_latent.json
  python3 bench/compare_latent.py --workload decode --workload sparse_h16 --methods mlakit,flashmla
  python3 bench/compare_latent.py --workload decode_h128 --methods mlakit --kv-split-size 512
  python3 bench/compare_latent.py --device cpu --smoke --methods mlakit,torch   # the harness on a CPU
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import latent_peers as LP  # noqa: E402
import latent_workloads as LW  # noqa: E402
import run_record as R  # noqa: E402
from latent_workloads import BS, L, SCALE  # noqa: E402

DEFAULT_METHODS = ["mlakit", "mlakit_slots", "mlakit_bf16", "mlakit_decoded", "flashmla", "flashmla_sparse", "flashmla_fp8",
                   "flashinfer_fa3_p16", "flashinfer_fa3_p1", "flashinfer_fa2_p16", "flashinfer_fa2_p1", "torch_sdpa",
                   "torch_matmul"]
ALIASES = {"torch": ["torch_sdpa", "torch_matmul"],
           "flashinfer": ["flashinfer_fa3_p16", "flashinfer_fa3_p1", "flashinfer_fa2_p16", "flashinfer_fa2_p1"],
           "peers": DEFAULT_METHODS[4:], "all": DEFAULT_METHODS}
# Tolerances of the max-element error over the row's largest |value|. bf16 outputs with P rounded
# to bf16 before P V (every kernel here does) land at 4-6e-3 on these random inputs (the CPU
# backend, torch_sdpa); a masking or indexing bug is off by O(1). torch_matmul's scores are rounded
# to bf16 before the softmax (a raw logit of ~50 off by ~0.1), which costs it 1-2e-2.
TOL = {"torch_matmul": 5e-2}
TOL_DEFAULT = 2e-2
MLAKIT_METHODS = ("mlakit", "mlakit_slots", "mlakit_bf16", "mlakit_decoded")


def log(msg=""):
    print(msg, flush=True)


def short(ex, limit=300):
    text = f"{type(ex).__name__}: {ex}".strip().splitlines()[0] if str(ex).strip() else type(ex).__name__
    return text if len(text) <= limit else text[:limit] + " ..."


def parse_methods(spec):
    out = []
    for m in (x.strip() for x in spec.split(",") if x.strip()):
        for n in ALIASES.get(m, [m]):
            ok = n in DEFAULT_METHODS or (n.startswith("flashinfer_") and len(n.split("_")) == 3 and
                                          n.split("_")[1] in ("fa2", "fa3") and n.split("_")[2][:1] == "p" and
                                          n.split("_")[2][1:].isdigit())
            if not ok:
                raise ValueError(f"unknown method {n!r}; known: {', '.join(DEFAULT_METHODS)} "
                                 f"(flashinfer_<fa3|fa2>_p<P>), aliases {', '.join(ALIASES)}")
            if n not in out:
                out.append(n)
    return out


# ----------------------------------------------------------------------------------------------
# Timing and ceilings, on CUDA (events) or on the CPU (the harness without a GPU).

def sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_calls(torch, dev, fn, warmup, iters):
    """Median ms of `iters` calls issued back to back after `warmup` calls: CUDA events around
    each call (no synchronization between them); host wall time on the CPU."""
    for _ in range(warmup):
        fn()
    sync(torch, dev)
    if dev.type != "cuda":
        ts = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize(dev)
    return statistics.median(s.elapsed_time(e) for s, e in ev)


def time_plan(torch, dev, fn, iters):
    """Median host µs of one plan() call, the device idle before each."""
    vals = []
    for _ in range(iters):
        sync(torch, dev)
        t0 = time.perf_counter()
        fn()
        vals.append((time.perf_counter() - t0) * 1e6)
    sync(torch, dev)
    return statistics.median(vals)


def measure_ceilings(torch, dev):
    if dev.type == "cuda":
        from ceilings import ceilings
        return ceilings(torch, dev)
    # The CPU: the same two figures at sizes a small machine does in a second.
    n, out = 1024, {}
    a, b = torch.randn(n, n, dtype=torch.bfloat16), torch.randn(n, n, dtype=torch.bfloat16)
    ms = time_calls(torch, dev, lambda: torch.matmul(a, b), 1, 3)
    out["gemm_bf16_1024_tflops"] = 2 * n ** 3 / (ms * 1e-3) / 1e12
    x = torch.randn(1 << 24, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    ms = time_calls(torch, dev, lambda: y.copy_(x), 1, 3)
    out["copy_GBps_rw"] = 2 * x.numel() * 2 / (ms * 1e-3) / 1e9
    return out


def gemm_ceiling(ceil):
    return next((v for k, v in ceil.items() if k.startswith("gemm_bf16_")), None)


def bw_ceiling(ceil):
    return ceil.get("d2d_copy_GBps_rw") or ceil.get("copy_GBps_rw")


# ----------------------------------------------------------------------------------------------
# mlakit.

INFO_FIELDS = ("num_items", "num_merges", "partial_rows", "block_rows", "kv_split_size", "visible_pairs",
               "decoded_rows", "cpu_isa")


def build_mlakit(torch, mlakit, w, inp, dev, kv_split_size, slots, bf16_cache=False, decoded=False):
    if slots and not w.sparse:
        raise LP.NotApplicable("sparse workloads only")
    if (bf16_cache or decoded) and not w.fp8:
        raise LP.NotApplicable("fp8 workloads only")
    fp8 = w.fp8 and not bf16_cache
    if mlakit is None:
        raise LP.Skip(MLAKIT_STATE["why"])
    device = f"cuda:{dev.index or 0}" if dev.type == "cuda" else "cpu"
    attn = mlakit.LatentAttention(w.heads, dtype=torch.bfloat16, device=device, block_size=BS,
                                  num_blocks=inp.num_blocks, max_batch=w.batch, max_q_tokens=w.total_q,
                                  max_kv_tokens=sum(w.kv_lens), max_topk=w.topk, kv_split_size=kv_split_size,
                                  kv_cache_dtype={"ds_mla": "fp8_ds_mla", "layer": "fp8"}[w.fp8] if fp8 else "auto",
                                  max_decoded_rows=sum((n + 63) // 64 * 64 for n in w.kv_lens) if decoded else 0)
    cache = inp.cache_fp8 if fp8 else inp.cache
    k_scale = inp.k_scale if fp8 and w.fp8 == "layer" else None
    kind = "slots" if slots else "positions"

    def plan():
        attn.plan(inp.q_lens_h, inp.kv_lens_h, inp.table_h, sm_scale=SCALE, topk=w.topk, indices=kind,
                  fp8_decode="once" if decoded else "auto")

    plan()
    idx = (inp.slots if slots else inp.positions) if w.sparse else None
    out = torch.empty(w.total_q, w.heads, L, device=inp.q.device, dtype=inp.q.dtype)

    def run():
        return attn.run(inp.q, cache, indices=idx, k_scale=k_scale, out=out)

    built = LP.Built(run, plan=plan)
    built.info = {k: getattr(attn.info, k) for k in INFO_FIELDS if hasattr(attn.info, k)}
    return built


MLAKIT_STATE = {"mod": None, "why": "not loaded"}


def load_mlakit(dev):
    try:
        import mlakit
    except Exception as ex:  # noqa: BLE001
        return None, f"import mlakit failed: {short(ex)}"
    if dev.type == "cuda" and hasattr(mlakit, "cuda_device_count") and mlakit.cuda_device_count() == 0:
        return None, f"the binding has no usable CUDA: {mlakit.cuda_unavailable_reason()}"
    return mlakit, f"mlakit {mlakit.info().get('version')} from {os.path.dirname(mlakit.__file__)}"


# ----------------------------------------------------------------------------------------------

def run_workload(torch, dev, w, methods, st, args, ceil):
    log(f"\n== {w.name}: {w.describe()}  GFLOP {w.flops() / 1e9:.3f}")
    case = {"workload": w.name, "family": w.family, "batch": w.batch, "q_len": w.q_len, "heads": w.heads,
            "topk": w.topk, "kv_lens": w.kv_lens, "causal": w.causal, "block_size": BS, "flops": w.flops(),
            "visible_pairs": w.visible_pairs(), "results": {}}
    try:
        inp = LW.Inputs(torch, w, dev, args.seed)
        tokens = LW.sample_tokens(w, args.check_tokens, args.seed)
        ref = LW.reference(torch, inp, tokens)
    except Exception as ex:  # noqa: BLE001
        log(f"  inputs/reference failed: {short(ex)}")
        case["error"] = short(ex)
        return case
    case.update(bytes=inp.bytes, gathered_bytes=inp.gathered_bytes, checked_tokens=len(tokens))
    g_ceil, b_ceil = gemm_ceiling(ceil), bw_ceiling(ceil)
    for m in methods:
        res = {}
        try:
            if m in MLAKIT_METHODS:
                built = build_mlakit(torch, MLAKIT_STATE["mod"], w, inp, dev, args.kv_split_size, m == "mlakit_slots",
                                     bf16_cache=m == "mlakit_bf16", decoded=m == "mlakit_decoded")
            else:
                built = LP.build(torch, st, m, w, inp)
            out = built.view(built.run())
            sync(torch, dev)
            err = LW.relerr(torch, out, ref, tokens)
            del out
            ms = time_calls(torch, dev, built.run, args.warmup, args.iters)
            tol = TOL.get(m, TOL_DEFAULT)
            res = {"ms": ms, "tflops": w.flops() / (ms * 1e-3) / 1e12, "gbps": inp.bytes / (ms * 1e-3) / 1e9,
                   "relerr": err, "tol": tol, "check": "PASS" if err <= tol else "FAIL"}
            if g_ceil:
                res["pct_gemm"] = 100.0 * res["tflops"] / g_ceil
            if b_ceil:
                res["pct_bw"] = 100.0 * res["gbps"] / b_ceil
            if built.plan is not None:
                res["plan_us"] = time_plan(torch, dev, built.plan, args.plan_iters)
            if getattr(built, "info", None):
                res["plan_info"] = built.info
            if built.note:
                res["note"] = built.note
            log(f"  {m:20s} {ms:9.4f} ms {res['tflops']:7.1f} TFLOP/s {res['gbps']:8.1f} GB/s  relerr {err:.1e} "
                f"{res['check']}" + (f"  plan {res['plan_us']:.1f} us" if "plan_us" in res else "")
                + (f"  ({built.note})" if built.note else ""))
            del built
        except LP.NotApplicable as ex:
            res = {"not_applicable": str(ex)}
        except LP.Skip as ex:
            res = {"skipped": str(ex)}
            log(f"  {m:20s} skipped: {ex}")
        except Exception as ex:  # noqa: BLE001
            res = {"skipped": f"error: {short(ex)}"}
            log(f"  {m:20s} skipped after an error: {short(ex)}")
            traceback.print_exc(limit=3)
        case["results"][m] = res
        try:
            sync(torch, dev)
        except Exception as ex:  # noqa: BLE001  (an asynchronous error of the method's launch)
            log(f"  {m}: the device reported an error after it: {short(ex)}")
            res.setdefault("device_error", short(ex))
    base = case["results"].get("mlakit", {}).get("ms")
    for r in case["results"].values():
        if base and "ms" in r:
            r["vs_mlakit"] = r["ms"] / base
    del inp, ref
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return case


def fmt(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def report(cases, ceil, args):
    g, b = gemm_ceiling(ceil), bw_ceiling(ceil)
    log(f"\nceilings this run: bf16 matmul {fmt(g, '.0f')} TFLOP/s, copy {fmt(b, '.0f')} GB/s; "
        f"ms = median of {args.iters}; vs mlakit = ms / mlakit's ms (> 1: mlakit faster)")
    for fam, title in LW.FAMILIES.items():
        rows = [c for c in cases if c["family"] == fam]
        if not rows:
            continue
        log(f"\n{title}")
        log(f"{'workload':14s} {'method':20s} {'ms':>9s} {'TFLOP/s':>8s} {'GB/s':>8s} {'%gemm':>6s} {'%bw':>5s} "
            f"{'vs mlakit':>9s} {'relerr':>8s} {'check':>5s} {'plan us':>8s}")
        for c in rows:
            name = c["workload"]
            if "error" in c:
                log(f"{name:14s} inputs failed: {c['error']}")
                continue
            for m, r in c["results"].items():
                if "not_applicable" in r:
                    continue
                if "ms" not in r:
                    log(f"{name:14s} {m:20s} skipped: {r.get('skipped', '')[:100]}")
                else:
                    log(f"{name:14s} {m:20s} {r['ms']:9.4f} {r['tflops']:8.1f} {r['gbps']:8.0f} "
                        f"{fmt(r.get('pct_gemm'), '6.1f'):>6s} {fmt(r.get('pct_bw'), '5.1f'):>5s} "
                        f"{fmt(r.get('vs_mlakit'), '9.2f'):>9s} {r['relerr']:8.1e} {r['check']:>5s} "
                        f"{fmt(r.get('plan_us'), '8.1f'):>8s}")
                name = ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--workload", action="append", default=[],
                    help="a workload or family (decode, mtp, sparse); repeatable; default all")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                    help="comma list (aliases: torch, flashinfer, peers, all)")
    ap.add_argument("--iters", type=int, default=None, help="timed calls (default 30; smoke 3)")
    ap.add_argument("--warmup", type=int, default=None, help="calls before timing (default 5; smoke 1)")
    ap.add_argument("--plan-iters", type=int, default=None, help="plan() calls timed (default 100; smoke 5)")
    ap.add_argument("--kv-split-size", type=int, default=0, help="LatentConfig.kv_split_size (0: the backend's)")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (the harness, small sizes)")
    ap.add_argument("--check-tokens", type=int, default=8, help="random query tokens checked besides the edges")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-ceilings", action="store_true")
    ap.add_argument("--no-peer-setup", action="store_true", help="do not install the offline peer copies")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, few iterations: checks that everything runs")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    args.iters = args.iters if args.iters is not None else (3 if args.smoke else 30)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 5)
    args.plan_iters = args.plan_iters if args.plan_iters is not None else (5 if args.smoke else 100)
    if args.iters < 1 or args.warmup < 0 or args.plan_iters < 1:
        ap.error("--iters and --plan-iters must be >= 1, --warmup >= 0")
    try:
        methods = parse_methods(args.methods)
        workloads = LW.select(args.workload, args.smoke)
    except ValueError as ex:
        ap.error(str(ex))

    import torch
    dev = torch.device(args.device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            log("compare_latent.py: no CUDA device visible to PyTorch (--device cpu runs the harness)")
            return 1
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(dev)
        props = torch.cuda.get_device_properties(dev)
        env = {"gpu": props.name, "sm_count": props.multi_processor_count, "torch_cuda": torch.version.cuda}
    elif dev.type == "cpu":
        env = {"gpu": None, "cpu_threads": torch.get_num_threads()}
    else:
        ap.error(f"--device {args.device}: cuda or cpu")
    env.update(torch=torch.__version__, python=sys.version.split()[0], device=str(dev))
    log(f"env: {env}")
    if args.smoke:
        log("SMOKE: tiny sizes, few iterations: checks that everything runs; the numbers mean nothing")
    ceil = {} if args.no_ceilings else measure_ceilings(torch, dev)
    log(f"ceilings (this run): {ceil}")
    if any(m in MLAKIT_METHODS for m in methods):
        MLAKIT_STATE["mod"], MLAKIT_STATE["why"] = load_mlakit(dev)
        env["mlakit"] = MLAKIT_STATE["why"]
        log(f"mlakit: {MLAKIT_STATE['why']}")
    st = LP.PeerState(torch, dev, any(m.startswith("flashmla") for m in methods),
                      any(m.startswith("flashinfer_") for m in methods), auto_setup=not args.no_peer_setup)
    env.update(flashmla=st.fmla_why, flashinfer=st.fi_why)
    log(f"flashmla: {st.fmla_why}\nflashinfer: {st.fi_why}")

    cases = [run_workload(torch, dev, w, methods, st, args, ceil) for w in workloads]
    try:
        report(cases, ceil, args)
    except Exception as ex:  # noqa: BLE001  (the JSON below must still be written)
        log(f"printing the tables failed: {short(ex)}")
        traceback.print_exc(limit=3)

    # mlakit failing its check, erroring or being refused fails the run; peers only report.
    bad = [f"{c['workload']}:{m}" for c in cases for m in MLAKIT_METHODS
           if m in c.get("results", {}) and c["results"][m].get("check", "SKIP") != "PASS"
           and "not_applicable" not in c["results"][m]]
    bad += [c["workload"] for c in cases if "error" in c]
    if args.json:
        doc = {"tool": "bench/compare_latent.py",
               "time_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "command_line": " ".join(sys.argv), "env": env, "ceilings": ceil, "smoke": args.smoke,
               "iters": args.iters, "warmup": args.warmup, "plan_iters": args.plan_iters,
               "kv_split_size": args.kv_split_size, "sm_scale": SCALE, "methods": methods,
               "method": (f"median of {args.iters} back-to-back calls after {args.warmup} warm-ups (CUDA events per "
                          "call; host wall on the CPU); tflops = 2*(576+512)*H*visible_pairs / time; gbps = bytes "
                          "(distinct latent rows per request x 1152) / time; pct_gemm / pct_bw = of this run's bf16 "
                          "matmul / copy ceilings; vs_mlakit = ms / mlakit ms; plan_us = median host wall of "
                          f"{args.plan_iters} plan() calls, device idle before each; relerr = max over checked "
                          "(token, head) of max|o - r| / max|r| against a float32 reference"),
               "git_commit": R.git_commit(), "source_digest": R.source_digest(), "cases": cases,
               "failed": bad}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(R.finite_or_none(doc), f, indent=1, default=lambda o: None)
        log(f"wrote {args.json}")
    if bad:
        log(f"mlakit did not pass on: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
