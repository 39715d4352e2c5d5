#!/usr/bin/env python3
"""Compare mlakit with PyTorch's attention kernels on the named MLA prefill workloads.

Runs on a GPU machine with PyTorch (no installs needed). Every method is timed the same way as
the anchors in shared/anchors/peers-h200-2026-12-02.json were: CUDA events around each call,
median of 30 calls after 5 warm-ups (--iters/--warmup), optionally rotating among input sets so
repeated calls do not run out of L2 (--rotate; 1 = one input set, like a plain loop).

Methods (each skipped with a printed reason when it cannot run):
  mlakit            the Python binding (import mlakit); if that fails, numbers read from
                    `mlakit-bench --json` (timed by that tool, not by this script; said so)
  fa2_varlen_padV   torch.ops.aten._flash_attention_forward on ragged cu_seqlens, V padded
                    Dvo -> Dqk (the pad is inside the timed call), output sliced back
  sdpa_cudnn        scaled_dot_product_attention, cuDNN backend, dense equal-length batches
  sdpa_efficient    scaled_dot_product_attention, memory-efficient backend, same batches
  flex_attention    torch.compile(flex_attention) with a document-(causal) block mask
  flashinfer_fa3    FlashInfer 0.7.2.post1 BatchPrefillWithRaggedKVCacheWrapper, backend "fa3"
  flashinfer_fa2    the same wrapper, backend "fa2". Planned once per workload (outside the
                    timed calls, as mlakit); run() timed like every other method. FlashInfer comes
                    from the offline copy in .peers/flashinfer (bench/peers.py installs it into
                    /tmp/site when `import flashinfer` fails; --no-fi-setup to forbid that)

FP8 (--dtype e4m3): also `mlakit_fp8`, mlakit's e4m3 kernel (bf16 output) on the same inputs
quantized to float8_e4m3fn with FlashAttention-3's descale factors ([batch, Hkv], amax / 448 of
each tensor), checked against the float32 reference of the dequantized inputs, beside mlakit's
bf16 kernel and the bf16 peers on every workload; the run also measures the FP8 matrix-product
ceiling (torch._scaled_mm e4m3 x e4m3 -> bf16, 8192^3, fast accumulation: cuBLASLt) and reports each FP8 row's
TFLOP/s, its % of that ceiling and its speedup over mlakit bf16. With sdpa_cudnn
asked for, its FP8 counterpart `cudnn_fp8` (bench/fp8_peers.py: cuDNN's FP8 SDPA through the
cudnn-frontend package; dense equal-length batches; an e4m3 output on Hopper) runs beside it.

plan() host cost (FlashInfer with host and with device indptr, mlakit with host indptr): host
wall time of one plan() call, device idle before it, median of --plan-iters calls.

Per-call cost (--overhead, on by default): at 1x999, for mlakit's run() (and its native
launch alone), its torch op and eager helper, mlakit.torch.flash_attn_varlen_func (device
cu_seqlens: unchanged, and read back every call; with host copies; host cu_seqlens), FA2's
_flash_attention_forward and FlashInfer's run(): the device time of the kernel(s) (CUDA events,
the host kept ahead of the device by a spin kernel), the host time until the call returns, and the
synchronized wall time of one call; overhead = synchronized wall - kernel time, the kernel time of
mlakit's rows being run()'s (a call that synchronizes has device events spanning its wait; see
bench/overhead.py).

Each output is checked against a float32 PyTorch reference on sampled rows and a few heads
(max over (row, head) of max|o - r| / max|r|). Also measured in the same run: the matrix-product
ceiling (8192^3 bf16 torch.matmul, mean of 10 after 3 warm-ups) and a device-to-device copy.

  python3 bench/compare.py --all --json results.json
  python3 bench/compare.py --workload 1x999 --methods mlakit,fa2_varlen_padV
  python3 bench/compare.py --smoke            # every workload scaled 1/16, 3 timed calls: seconds
"""
from __future__ import annotations

import argparse
import bisect
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run_record as R  # noqa: E402
import workloads as W  # noqa: E402

import fp8_peers  # noqa: E402
import overhead as OH  # noqa: E402
from ceilings import ceilings  # noqa: E402
import peers  # noqa: E402

ALL_METHODS = ["mlakit", "flashinfer_fa3", "flashinfer_fa2", "fa2_varlen_padV", "sdpa_cudnn",
               "sdpa_efficient", "flex_attention"]
# Not run by default: mlakit with its key-range splitting off (kv_split="off"), for measuring
# what the default split rules (the tail rule) buy in the same process; mlakit's FP8 kernel
# (added by --dtype e4m3).
EXTRA_METHODS = ["mlakit_nosplit", "mlakit_fp8", "cudnn_fp8"]
# FP8 methods: checked against the reference of the dequantized inputs at these row-max tolerances
# (an element's error over its row's largest |value|). P rounded to e4m3 (3 mantissa bits) costs
# ~2% of a row's L2 norm (docs/fp8.md) and up to ~6% of its largest element on peaked rows (4.1-5.3%
# measured on the H100 over every workload); cuDNN's e4m3 output adds its own rounding (7.2-8.1%).
FP8_TOL = {"mlakit_fp8": 8e-2, "cudnn_fp8": 1e-1}
FI_BACKENDS = {"flashinfer_fa3": "fa3", "flashinfer_fa2": "fa2"}
ANCHOR_DIRS = [os.path.join(REPO, "shared", "anchors"), os.path.join(os.path.dirname(REPO), "shared", "anchors")]
ANCHOR_FILE_A = "peers-h200-2026-12-02.json"     # FA2 / SDPA / Flex, per case
ANCHOR_FILE_B = "peers-h200-2026-12-02-b.json"   # FlashInfer fa3/fa2, FA4, cuDNN, mlakit 775805f
# Method -> column of the B file's rows ([ms, TFLOP/s]); fa2/cudnn there only when A lacks them.
ANCHOR_B_COLUMN = {"mlakit": "mlakit_775805f", "flashinfer_fa3": "flashinfer_fa3_runA",
                   "flashinfer_fa2": "flashinfer_fa2", "fa2_varlen_padV": "fa2_varlen_padV",
                   "sdpa_cudnn": "cudnn"}
L2_BYTES = 60e6


class Skip(Exception):
    """A method that does not apply to a workload (or cannot run here); the message says why."""


def log(msg=""):
    print(msg, flush=True)


def short(ex, limit=300):
    """One line of an exception for tables and JSON (some carry pages of dispatcher text)."""
    text = f"{type(ex).__name__}: {ex}".strip().splitlines()[0] if str(ex).strip() else type(ex).__name__
    return text if len(text) <= limit else text[:limit] + " ..."


# ----------------------------------------------------------------------------------------------
# Timing: the anchors' method.

def time_cuda(torch, fn, nsets, warmup, iters, gap_ms=0.0, window=None):
    """Median ms of `iters` CUDA-event-timed calls after `warmup` calls; fn(i) uses set i % nsets.
    Also a host wall-clock median of synchronized calls (sync_wall_ms), as the anchors report.
    With gap_ms > 0 (--gap-ms) each timed call starts from an idle GPU (synchronize, sleep) instead of back
    to back: long launches then run before the GPU's power cap lowers its clock. window: a list that
    receives the host times (perf_counter) the event-timed calls ran between."""
    for i in range(warmup):
        fn(i % nsets)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    t0 = time.perf_counter()
    for i in range(iters):
        if gap_ms > 0:
            torch.cuda.synchronize()
            time.sleep(gap_ms / 1000.0)
        starts[i].record()
        fn(i % nsets)
        ends[i].record()
    torch.cuda.synchronize()
    if window is not None:
        window[:] = [t0, time.perf_counter()]
    ms = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))
    walls = []
    for i in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(i % nsets)
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
    return ms, statistics.median(walls)


# ----------------------------------------------------------------------------------------------
# Inputs and the float32 reference.

def torch_dtype(torch, name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def make_sets(torch, w, nsets, dev, seed):
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    dt = torch_dtype(torch, w.dtype)
    sets = []
    for _ in range(nsets):
        q = torch.randn(w.total_q, w.heads, w.dqk, device=dev, dtype=dt, generator=g)
        k = torch.randn(w.total_kv, w.kv_heads, w.dqk, device=dev, dtype=dt, generator=g)
        v = torch.randn(w.total_kv, w.kv_heads, w.dvo, device=dev, dtype=dt, generator=g)
        sets.append((q, k, v))
    return sets


def fp8_sets(torch, w, sets):
    """Each input set quantized to float8_e4m3fn as an engine would feed FlashAttention-3: one
    descale per tensor (amax / 448), given as [batch, Hkv] factors; and set 0 dequantized (the
    inputs the FP8 result is checked against)."""
    out = []
    for q, k, v in sets:
        quant = []
        for x in (q, k, v):
            scale = max(float(x.abs().amax()), 1e-30) / 448.0
            x8 = (x.float() / scale).to(torch.float8_e4m3fn)
            d = torch.full((max(w.batch, 1), w.kv_heads), scale, device=x.device, dtype=torch.float32)
            quant.append((x8, d))
        out.append(quant)
    deq = tuple((x8.float() * d[0, 0]).to(torch.float32) for x8, d in out[0])
    return out, deq


def sample_rows(w, nrandom, seed):
    import random
    rng = random.Random(seed)
    qo = w.qo_indptr()
    rows = set()
    for b in range(w.batch):
        if qo[b + 1] > qo[b]:
            rows.add(qo[b])
            rows.add(qo[b + 1] - 1)
    for _ in range(nrandom):
        rows.add(rng.randrange(w.total_q))
    return sorted(rows)


def check_heads(w):
    return sorted({0, w.heads // 2, w.heads - 1})


def reference(torch, w, q, k, v, rows, heads):
    """float32 attention for the sampled rows and heads: [len(rows), len(heads), Dvo]."""
    qo, kv = w.qo_indptr(), w.kv_indptr()
    scale = 1.0 / math.sqrt(w.dqk)
    group = w.heads // w.kv_heads
    kvh = [h // group for h in heads]
    out = torch.empty(len(rows), len(heads), w.dvo, device=q.device, dtype=torch.float32)
    by_seq = {}
    for n, r in enumerate(rows):
        b = bisect.bisect_right(qo, r) - 1
        by_seq.setdefault(b, []).append(n)
    for b, idx in by_seq.items():
        lq, lk = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
        r_global = torch.tensor([rows[n] for n in idx], device=q.device)
        qi = q[r_global][:, heads].float()                      # [n, h, Dqk]
        kk = k[kv[b]:kv[b + 1]][:, kvh].float()                  # [lk, h, Dqk]
        vv = v[kv[b]:kv[b + 1]][:, kvh].float()                  # [lk, h, Dvo]
        s = torch.einsum("nhd,khd->hnk", qi, kk) * scale
        local = r_global - qo[b]
        diag = (lk - lq + local).view(1, -1, 1)
        j = torch.arange(lk, device=q.device).view(1, 1, -1)
        mask = torch.ones_like(s, dtype=torch.bool)
        if w.causal:
            mask &= j <= diag
        if w.window_left >= 0:
            mask &= j >= diag - w.window_left
        s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)            # rows with no key -> 0
        o = torch.einsum("hnk,khd->nhd", p, vv)
        out[torch.tensor(idx, device=q.device)] = o
    return out


def relerr(torch, out_ragged, ref, rows, heads):
    o = out_ragged[torch.tensor(rows, device=out_ragged.device)][:, heads].float()
    if not torch.isfinite(o).all():
        return float("inf")
    diff = (o - ref).abs().amax(dim=-1)
    scale = ref.abs().amax(dim=-1)
    rel = torch.where(scale > 0, diff / scale.clamp_min(1e-30), diff)
    return float(rel.max())


# ----------------------------------------------------------------------------------------------
# Methods. Each build_* returns (run(i) -> output, to_ragged(output) -> [Tq, H, Dvo], context).

class NullCtx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def build_fa2(torch, w, sets, dev):
    if w.dqk < w.dvo:
        raise Skip("Dqk < Dvo")
    if w.dqk > 256:
        raise Skip("FA2 supports head dim <= 256")
    cu_q = torch.tensor(w.qo_indptr(), dtype=torch.int32, device=dev)
    cu_k = torch.tensor(w.kv_indptr(), dtype=torch.int32, device=dev)
    max_q, max_k = max(w.q_lens), max(w.kv_lens)
    pad = w.dqk - w.dvo
    scale = 1.0 / math.sqrt(w.dqk)
    kwargs = {"scale": scale}
    if w.window_left >= 0:
        kwargs["window_size_left"] = w.window_left
        kwargs["window_size_right"] = 0 if w.causal else -1
    F = torch.nn.functional

    def run(i):
        q, k, v = sets[i]
        vp = F.pad(v, (0, pad)) if pad else v  # FA2 needs Dv == Dqk: the pad is part of the cost
        out = torch.ops.aten._flash_attention_forward(
            q, k, vp, cu_q, cu_k, max_q, max_k, 0.0, w.causal, False, **kwargs)[0]
        return out[..., :w.dvo]

    return run, (lambda o: o), NullCtx()


def build_sdpa(torch, w, sets, dev, backend_name):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if not w.equal_lengths:
        raise Skip("ragged lengths (dense SDPA would need padding)")
    B, lq, lk = w.batch, w.q_lens[0], w.kv_lens[0]
    if w.causal and lq != lk:
        raise Skip("causal with lq != lk (SDPA is_causal aligns top-left)")
    if w.window_left >= 0:
        raise Skip("sliding window not expressible without a dense mask")
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend_name]
    dense = []
    for q, k, v in sets:  # [T, H, D] -> [B, H, L, D] views, no copies
        dense.append((q.view(B, lq, w.heads, w.dqk).transpose(1, 2),
                      k.view(B, lk, w.kv_heads, w.dqk).transpose(1, 2),
                      v.view(B, lk, w.kv_heads, w.dvo).transpose(1, 2)))
    F = torch.nn.functional
    gqa = {"enable_gqa": True} if w.kv_heads != w.heads else {}
    scale = 1.0 / math.sqrt(w.dqk)

    def run(i):
        q, k, v = dense[i]
        return F.scaled_dot_product_attention(q, k, v, is_causal=w.causal, scale=scale, **gqa)

    def to_ragged(o):
        return o.transpose(1, 2).reshape(w.total_q, w.heads, w.dvo)

    return run, to_ragged, sdpa_kernel([backend])


def build_flex(torch, w, sets, dev, max_elems):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if w.window_left >= 0:
        raise Skip("window not wired for flex here")
    if w.total_q * w.total_kv > max_elems:
        raise Skip(f"q*kv = {w.total_q * w.total_kv:.3g} > --flex-max-elems {max_elems:.3g} "
                   "(block-mask build too slow/large)")
    qo, kv = w.qo_indptr(), w.kv_indptr()
    doc_q = torch.repeat_interleave(torch.arange(w.batch, device=dev),
                                    torch.tensor(w.q_lens, device=dev))
    doc_k = torch.repeat_interleave(torch.arange(w.batch, device=dev),
                                    torch.tensor(w.kv_lens, device=dev))
    # Last visible global kv index of each query (causal, aligned bottom-right).
    q_off = torch.tensor(qo[:-1], device=dev)[doc_q]
    k_off = torch.tensor(kv[:-1], device=dev)[doc_q]
    lq = torch.tensor(w.q_lens, device=dev)[doc_q]
    lk = torch.tensor(w.kv_lens, device=dev)[doc_q]
    q_last = k_off + (lk - lq) + (torch.arange(w.total_q, device=dev) - q_off)
    causal = w.causal

    def mask_mod(b, h, q_idx, kv_idx):
        same = doc_q[q_idx] == doc_k[kv_idx]
        if causal:
            return same & (kv_idx <= q_last[q_idx])
        return same

    try:  # _compile=True builds the block mask without materializing the dense mask
        block_mask = create_block_mask(mask_mod, B=None, H=None, Q_LEN=w.total_q,
                                       KV_LEN=w.total_kv, device=dev, _compile=True)
    except TypeError:
        block_mask = create_block_mask(mask_mod, B=None, H=None, Q_LEN=w.total_q,
                                       KV_LEN=w.total_kv, device=dev)
    try:
        torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
    except Exception:  # noqa: BLE001
        pass
    flex = torch.compile(flex_attention, dynamic=False)
    views = [(q.unsqueeze(0).transpose(1, 2), k.unsqueeze(0).transpose(1, 2),
              v.unsqueeze(0).transpose(1, 2)) for q, k, v in sets]
    gqa = {"enable_gqa": True} if w.kv_heads != w.heads else {}
    scale = 1.0 / math.sqrt(w.dqk)

    def run(i):
        q, k, v = views[i]
        return flex(q, k, v, block_mask=block_mask, scale=scale, **gqa)

    return run, (lambda o: o[0].transpose(0, 1)), NullCtx()


class Runner:
    """What a build_* returns besides run/to_ragged/ctx: optional plan() callables to time
    ({"host": fn, "device": fn}: plan from host or device indptr)."""

    def __init__(self, plan_fns=None):
        self.plan_fns = plan_fns or {}


def build_mlakit(torch, mlakit, w, sets, dev, kv_split="auto", fp8=False):
    """mlakit's RaggedPrefill on the workload, planned once. fp8: e4m3 inputs with bf16 output;
    each set is ((q, q_descale), (k, k_descale), (v, v_descale)) (fp8_sets)."""
    dtype = dict(dtype="e4m3", out_dtype="bf16") if fp8 else dict(dtype=torch_dtype(torch, w.dtype))
    p = mlakit.RaggedPrefill(num_qo_heads=w.heads, num_kv_heads=w.kv_heads, head_dim_qk=w.dqk,
                             head_dim_vo=w.dvo, max_batch=w.batch, max_q_tokens=w.total_q,
                             max_kv_tokens=w.total_kv, device="cuda", kv_split=kv_split, **dtype)
    qo_h = torch.tensor(w.qo_indptr(), dtype=torch.int32)
    kv_h = torch.tensor(w.kv_indptr(), dtype=torch.int32)

    def plan_host():
        p.plan(qo_h, kv_h, causal=w.causal)

    plan_host()

    def run(i):
        if fp8:
            (q, qd), (k, kd), (v, vd) = sets[i]
            return p.run(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd)
        q, k, v = sets[i]
        return p.run(q, k, v)

    return run, (lambda o: o), NullCtx(), Runner({"host": plan_host})


_FI_WORKSPACE = {}


def fi_workspace(torch, dev, nbytes=512 << 20):
    """One 512 MiB float workspace shared by every FlashInfer wrapper of this run (they never
    run concurrently); the size the README's usage and the anchors used."""
    if "buf" not in _FI_WORKSPACE:
        _FI_WORKSPACE["buf"] = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    return _FI_WORKSPACE["buf"]


def build_flashinfer(torch, fi, w, sets, dev, backend, allow_jit):
    """FlashInfer's ragged prefill wrapper, planned once; run() timed. Plan: flashinfer/prefill.py
    BatchPrefillWithRaggedKVCacheWrapper.plan(qo_indptr, kv_indptr, num_qo_heads, num_kv_heads,
    head_dim_qk, head_dim_vo=, causal=, window_left=, sm_scale=, q_data_type=)."""
    if fi is None:
        raise Skip(FI_STATE["why"])
    prebuilt = (w.dtype == "bf16" and (w.dqk, w.dvo) == (192, 128) and w.window_left < 0)
    if not prebuilt and not allow_jit:
        raise Skip("no prebuilt module for this shape/option (bf16 (192,128) without window only); "
                   "--fi-allow-jit compiles one (fa3: minutes)")
    from flashinfer.prefill import BatchPrefillWithRaggedKVCacheWrapper
    wrapper = BatchPrefillWithRaggedKVCacheWrapper(fi_workspace(torch, dev), "NHD", backend=backend)
    qo_h = torch.tensor(w.qo_indptr(), dtype=torch.int32)
    kv_h = torch.tensor(w.kv_indptr(), dtype=torch.int32)
    qo_d, kv_d = qo_h.to(dev), kv_h.to(dev)
    kwargs = dict(head_dim_vo=w.dvo, causal=w.causal, sm_scale=1.0 / math.sqrt(w.dqk),
                  q_data_type=torch_dtype(torch, w.dtype), window_left=w.window_left)

    def plan_with(qo, kv):
        wrapper.plan(qo, kv, w.heads, w.kv_heads, w.dqk, **kwargs)

    t0 = time.perf_counter()
    plan_with(qo_d, kv_d)  # the first plan loads the module (prebuilt .so, or a JIT build)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    if first > 1.0:
        log(f"  (flashinfer {backend}: first plan() took {first:.1f} s: module load/JIT)")

    def run(i):
        q, k, v = sets[i]
        return wrapper.run(q, k, v)

    return run, (lambda o: o), NullCtx(), Runner({"host": lambda: plan_with(qo_h, kv_h),
                                                  "device": lambda: plan_with(qo_d, kv_d)})


FI_STATE = {"mod": None, "why": "not loaded", "info": None}


def time_plan(torch, fn, iters):
    """Median host wall time (µs) of one plan() call, the device idle before each call (so a plan
    that synchronizes is not charged for queued work)."""
    fn()
    vals = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        vals.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(vals)


# ----------------------------------------------------------------------------------------------
# mlakit through mlakit-bench, when the binding is unavailable.

def find_bench_binary(explicit):
    cands = [explicit, os.environ.get("MLAKIT_BENCH")]
    bd = os.environ.get("MLAKIT_BUILD_DIR")
    if bd:
        cands.append(os.path.join(bd, "mlakit-bench"))
    cands += [os.path.join(REPO, d, "mlakit-bench") for d in ("build-gpu", "build", "build-release")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def bench_fallback(binary, names, iters, warmup):
    """{workload name: result dict} from one mlakit-bench --json run on cuda."""
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "bench.json")
        cmd = [binary, "--device", "cuda", "--iters", str(iters), "--warmup", str(warmup), "--json", path]
        for n in names:
            cmd += ["--workload", n]
        log("mlakit via mlakit-bench: " + " ".join(cmd))
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log(proc.stdout)
        if not os.path.exists(path):
            raise RuntimeError(f"mlakit-bench wrote no JSON (exit {proc.returncode})")
        with open(path) as f:
            data = json.load(f)
    return {r["workload"]: r for r in data.get("results", [])}


# ----------------------------------------------------------------------------------------------

def _load_json(name):
    for d in ANCHOR_DIRS:
        try:
            with open(os.path.join(d, name)) as f:
                return json.load(f)
        except Exception:  # noqa: BLE001
            continue
    return {}


def load_anchors():
    """{workload name: {method: anchor ms}} from both anchors files (earlier H200 runs)."""
    a = {c["case"]: c.get("results", {}) for c in _load_json(ANCHOR_FILE_A).get("cases", [])}
    b = {r["workload"]: r for r in _load_json(ANCHOR_FILE_B).get("rows", [])}
    out = {}
    for w in W.named_workloads():
        ms = {}
        for m, r in a.get(W.ANCHOR_CASE.get(w.name) or "", {}).items():
            if isinstance(r, dict) and r.get("ms"):
                ms[m] = r["ms"]
        row = b.get(W.ANCHOR_B_ROW.get(w.name) or "", {})
        for m, col in ANCHOR_B_COLUMN.items():
            v = row.get(col)
            if m not in ms and isinstance(v, list) and v and v[0]:
                ms[m] = v[0]
        for m, key in (("flashinfer_fa3", "flashinfer_fa3_plan_us"), ("flashinfer_fa2", "flashinfer_fa2_plan_us"),
                       ("mlakit", "mlakit_plan_us_python")):
            if row.get(key):
                ms[m + ":plan_us"] = row[key]
        out[w.name] = ms
    return out


def fmt(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def report_fp8(cases, ceil):
    """The FP8 table: mlakit_fp8 beside mlakit bf16 (TFLOP/s, % of the FP8 ceiling, speedup) and
    beside the FP8 peers that ran (their TFLOP/s; vs = peer ms / mlakit_fp8 ms)."""
    rows = [c for c in cases if "ms" in c["results"].get("mlakit_fp8", {})]
    if not rows:
        return
    peers_ = [m for m in FP8_TOL if m != "mlakit_fp8" and any("ms" in c["results"].get(m, {}) for c in rows)]
    fp8_ceil = ceil.get("gemm_e4m3_8192_tflops")
    log("")
    log(f"FP8 (e4m3 -> bf16): {'% of ' + format(fp8_ceil, '.0f') + ' = FP8 ceiling' if fp8_ceil else 'no FP8 ceiling'}")
    log(f"{'workload':20s} {'fp8 ms':>9s} {'TFLOP/s':>8s} {'%fp8ceil':>8s} {'bf16 ms':>9s} {'bf16 TF/s':>9s} "
        f"{'speedup':>8s} {'relerr':>8s}" + "".join(f" {m + ' TF/s':>24s} {'vs':>5s}" for m in peers_))
    for c in rows:
        f8, bf = c["results"]["mlakit_fp8"], c["results"].get("mlakit", {})
        sp = bf["ms"] / f8["ms"] if bf.get("ms") else float("nan")
        line = (f"{c['workload']:20s} {f8['ms']:9.4f} {f8['tflops']:8.1f} {fmt(f8.get('pct_fp8_ceiling'), '8.1f'):>8s} "
                f"{fmt(bf.get('ms', float('nan')), '9.4f'):>9s} {fmt(bf.get('tflops', float('nan')), '9.1f'):>9s} "
                f"{fmt(sp, '8.2f'):>8s} {fmt(f8.get('relerr'), '8.1e'):>8s}")
        for m in peers_:
            r = c["results"].get(m, {})
            line += f" {fmt(r.get('tflops', float('nan')), '24.1f'):>24s} {fmt(r['ms'] / f8['ms'] if r.get('ms') else float('nan'), '5.2f'):>5s}"
        log(line)
    log("speedup = mlakit bf16 ms / mlakit fp8 ms; vs = peer ms / mlakit fp8 ms; relerr against the float32 "
        "reference of the dequantized inputs (row max |o - r| / max |r|)")


def report(cases, anchors, ceil, peak_tflops, mlakit_source):
    """The results table: every method of every workload, ratio to mlakit, % of the ceiling."""
    ceiling_tflops = ceil.get("gemm_bf16_8192_tflops")
    ceil_txt = f"{ceiling_tflops:.0f}" if ceiling_tflops else None
    log("")
    log(f"{'workload':20s} {'method':16s} {'ms':>9s} {'TFLOP/s':>8s} "
        f"{('%ceil' if ceil_txt else '%' + format(peak_tflops, '.0f')):>6s} "
        f"{'vs mlakit':>9s} {'relerr':>8s} {'anchor ms':>9s} {'plan us (host/dev indptr)':>26s}")
    for c in cases:
        ml = c["results"].get("mlakit", {}).get("ms")
        anc = anchors.get(c["workload"], {}) if c.get("scale_divisor", 1) == 1 else {}
        for m, r in c["results"].items():
            if "skipped" in r:
                log(f"{c['workload']:20s} {m:16s} skipped: {r['skipped']}")
                continue
            ratio = r["ms"] / ml if ml else float("nan")
            pct = r.get("pct_ceiling", r["pct_peak"])
            pl = "/".join(fmt(r.get(f"plan_us_{k}_indptr"), ".1f") for k in ("host", "device")
                          if f"plan_us_{k}_indptr" in r)
            log(f"{c['workload']:20s} {m:16s} {r['ms']:9.4f} {r['tflops']:8.1f} {pct:6.1f} "
                f"{fmt(ratio, '9.2f'):>9s} {fmt(r.get('relerr'), '8.1e'):>8s} "
                f"{fmt(anc.get(m, float('nan')), '9.4f'):>9s} {pl:>26s}")
    log("vs mlakit = method ms / mlakit ms (>1: mlakit is faster); "
        + (f"%ceil = TFLOP/s / this run's matmul ceiling ({ceil_txt} TFLOP/s); " if ceil_txt else "")
        + f"anchor ms from shared/anchors/{ANCHOR_FILE_A} and {ANCHOR_FILE_B} (earlier runs)")
    report_fp8(cases, ceil)
    if ceil:
        fp8 = (f", FP8 matmul {fmt(ceil.get('gemm_e4m3_8192_tflops'), '.1f')} TFLOP/s"
               if "gemm_e4m3_8192_tflops" in ceil or "gemm_e4m3_error" in ceil else "")
        log(f"ceilings this run: matmul {fmt(ceil.get('gemm_bf16_8192_tflops'), '.1f')} TFLOP/s{fp8}, "
            f"copy {fmt(ceil.get('d2d_copy_GBps_rw'), '.0f')} GB/s (read+write)")
    if mlakit_source:
        log(f"mlakit numbers from: {mlakit_source}")


def select_methods(requested, dtype, smoke):
    """The methods of a run: --methods (comma list) or the default set; with e4m3, mlakit's FP8
    kernel and the FP8 peer whose bf16 counterpart runs."""
    if requested is None:
        methods = [m for m in ALL_METHODS if not (smoke and m == "flex_attention")]
    else:
        methods = [m.strip() for m in requested.split(",") if m.strip()]
    if dtype == "e4m3":
        for m, with_ in (("mlakit_fp8", None), ("cudnn_fp8", "sdpa_cudnn")):
            if m not in methods and (with_ is None or with_ in methods):
                methods.append(m)
    return methods


def build_method(torch, m, w, sets, sets8, dev, mlakit_mod, args):
    """(run, to_ragged, ctx[, runner]) of method m on workload w's input sets."""
    if m == "mlakit":
        return build_mlakit(torch, mlakit_mod, w, sets, dev)
    if m == "mlakit_nosplit":
        return build_mlakit(torch, mlakit_mod, w, sets, dev, kv_split="off")
    if m == "mlakit_fp8":
        return build_mlakit(torch, mlakit_mod, w, sets8, dev, fp8=True)
    if m == "cudnn_fp8":
        return fp8_peers.build_cudnn_fp8(torch, w, sets8, dev, Skip)
    if m in FI_BACKENDS:
        return build_flashinfer(torch, FI_STATE["mod"], w, sets, dev, FI_BACKENDS[m], args.fi_allow_jit)
    if m == "fa2_varlen_padV":
        return build_fa2(torch, w, sets, dev)
    if m == "sdpa_cudnn":
        return build_sdpa(torch, w, sets, dev, "cudnn")
    if m == "sdpa_efficient":
        return build_sdpa(torch, w, sets, dev, "efficient")
    return build_flex(torch, w, sets, dev, args.flex_max_elems)


def turn_orders(methods, turns):
    """The order of the methods' timed blocks in each turn: turn t starts at method t (mod n), so
    over n turns each method runs first once, and with two methods the turns go A B, B A: a method
    timed right after another's calls reads slower under the GPU's power cap."""
    n = len(methods)
    return [[methods[(t + i) % n] for i in range(n)] for t in range(turns)] if n else [[] for _ in range(turns)]


def combine_turns(ms_turns):
    """A method's time over its turns: the median of the turns' medians."""
    return statistics.median(ms_turns)


def set_rates(res, m, case, args, ceiling_tflops, ceil):
    """res's rates from its tflops and ms: % of the fixed peak and of this run's ceilings, and an FP8
    method's speed-up over mlakit's bf16 kernel (when that ran first)."""
    res["pct_peak"] = 100.0 * res["tflops"] / args.peak_tflops
    if ceiling_tflops:
        res["pct_ceiling"] = 100.0 * res["tflops"] / ceiling_tflops
    if m in FP8_TOL:
        if ceil.get("gemm_e4m3_8192_tflops"):
            res["pct_fp8_ceiling"] = 100.0 * res["tflops"] / ceil["gemm_e4m3_8192_tflops"]
        bf = case["results"].get("mlakit", {}).get("ms")
        if bf:
            res["speedup_vs_mlakit_bf16"] = bf / res["ms"]


def more_turns(torch, case, methods, w, sets, sets8, dev, mlakit_mod, args, nsets, warmup, iters, flops,
               ceiling_tflops, ceil):
    """Turns 2..--turns of one workload: each method timed again (built anew, not checked again),
    in turn_orders' order; then each method's ms is the median of its turns (`ms_turns` keeps
    them) and its rates follow it. Methods that were skipped or came from mlakit-bench stay as
    they are."""
    timed = [m for m in methods if "ms" in case["results"][m] and case["results"][m].get("source") != "mlakit-bench"]
    for r in timed:
        case["results"][r]["ms_turns"] = [case["results"][r]["ms"]]
    for order in turn_orders(timed, args.turns)[1:]:
        for m in order:
            res = case["results"][m]
            try:
                built = build_method(torch, m, w, sets, sets8, dev, mlakit_mod, args)
                run, _, ctx = built[:3]
                with ctx or NullCtx():
                    ms, _ = time_cuda(torch, run, nsets, warmup, iters, args.gap_ms)
                res["ms_turns"].append(ms)
                del built, run
            except Exception as ex:  # noqa: BLE001
                log(f"  {m:16s} a later turn failed: {short(ex)}")
            torch.cuda.synchronize()
    for m in timed:  # mlakit's first (--methods order), so FP8 speed-ups read its combined ms
        res = case["results"][m]
        res["ms"] = combine_turns(res["ms_turns"])
        res["tflops"] = flops / (res["ms"] * 1e-3) / 1e12
        set_rates(res, m, case, args, ceiling_tflops, ceil)
        log(f"  {m:16s} turns {' '.join('%.4f' % x for x in res['ms_turns'])} ms -> {res['ms']:.4f} ms "
            f"{res['tflops']:.1f} TFLOP/s")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", action="append", default=[], help="named workload (repeatable)")
    ap.add_argument("--all", action="store_true", help="every named workload (the default)")
    ap.add_argument("--custom", action="append", default=[],
                    help='extra workload "Q[:KV][/c|/n][@H]" in mlakit-bench --lens syntax, e.g. 16x999 or '
                         '8x1024:8x4096/n or 1x4096@128 (repeatable; bench/workloads.py custom())')
    ap.add_argument("--dims", default=None,
                    help="run every workload at these head dims instead, DQKxDVO (e.g. 128x128); the "
                         "workloads are renamed '<name> d128x128' (no anchors, no mlakit-bench fallback)")
    ap.add_argument("--methods", default=None, help="comma list of: " + ", ".join(ALL_METHODS) +
                    " (default: all; with --smoke all but flex_attention)")
    ap.add_argument("--iters", type=int, default=None, help="timed calls (default 30; --smoke 3)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up calls (default 5; --smoke 1)")
    ap.add_argument("--rotate", type=int, default=0,
                    help="input sets to rotate (0 = auto: enough to exceed 2x L2, at most 8)")
    ap.add_argument("--check-rows", type=int, default=256, help="random rows checked (plus first/last)")
    ap.add_argument("--peak-tflops", type=float, default=774.0,
                    help="fixed reference for pct_peak (pct_ceiling uses this run's measured matmul)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "e4m3"],
                    help="e4m3: also mlakit's FP8 kernel (method mlakit_fp8) beside the bf16 methods, and "
                         "the FP8 matmul ceiling (default bf16: the bf16 methods only)")
    ap.add_argument("--turns", type=int, default=1,
                    help="time every method's calls this many times per workload, the methods in turns "
                         "(turn t starts at method t), and report the median of the turns (default 1: "
                         "one block each, in --methods order)")
    ap.add_argument("--gap-ms", type=float, default=0.0,
                    help="rest the GPU this long before each timed call (default 0: back to back)")
    ap.add_argument("--clocks", action="store_true",
                    help="sample the SM clock and board power during each method's timed calls (NVML or "
                         "nvidia-smi; bench/gpu_clock.py) and report their median / mean")
    ap.add_argument("--bench-bin", default=None, help="mlakit-bench for the fallback")
    ap.add_argument("--no-ceilings", action="store_true", help="skip the matmul/copy ceilings")
    ap.add_argument("--flex-max-elems", type=float, default=float(2 ** 30),
                    help="skip FlexAttention when total_q*total_kv exceeds this (default 2^30)")
    ap.add_argument("--plan-iters", type=int, default=None, help="plan() calls timed (default 100; --smoke 5)")
    ap.add_argument("--no-fi-setup", action="store_true",
                    help="do not install the offline FlashInfer copy when `import flashinfer` fails")
    ap.add_argument("--fi-allow-jit", action="store_true",
                    help="let FlashInfer JIT-compile modules for shapes that are not prebuilt")
    ap.add_argument("--overhead", default="1x999",
                    help="workload of the per-call cost table; 'none' to skip")
    ap.add_argument("--smoke", action="store_true",
                    help="quick check that everything runs: workloads scaled 1/16, 3 timed calls, no Flex")
    ap.add_argument("--json", default=None, help="write results here")
    args = ap.parse_args(argv)
    iters = args.iters if args.iters is not None else (3 if args.smoke else 30)
    warmup = args.warmup if args.warmup is not None else (1 if args.smoke else 5)
    plan_iters = args.plan_iters if args.plan_iters is not None else (5 if args.smoke else 100)
    if iters < 1 or warmup < 0 or plan_iters < 1:
        ap.error("--iters and --plan-iters must be >= 1, --warmup >= 0")
    if args.turns < 1:
        ap.error("--turns must be >= 1")
    if not 0.0 <= args.gap_ms <= 10000.0:
        ap.error("--gap-ms must be between 0 and 10000")

    names = args.workload or ([] if args.custom else [w.name for w in W.named_workloads()])
    wls = []
    for spec in args.custom:
        try:
            wls.append(W.custom(spec))
        except ValueError as ex:
            ap.error(f"--custom: {ex}")
    for n in names:
        w = W.find(n)
        if w is None:
            ap.error(f"unknown workload {n!r}; known: {', '.join(x.name for x in W.named_workloads())}")
        wls.append(W.scaled(w, 16) if args.smoke else w)
    if args.dims:
        try:
            dqk, dvo = W.parse_dims(args.dims)
        except ValueError as ex:
            ap.error(f"--dims: {ex}")
        wls = [W.with_dims(w, dqk, dvo) for w in wls]
    methods = select_methods(args.methods, args.dtype, args.smoke)
    for m in methods:
        if m not in ALL_METHODS + EXTRA_METHODS:
            ap.error(f"unknown method {m!r}")

    try:
        import torch
    except Exception as ex:  # noqa: BLE001
        log(f"compare.py: PyTorch is not importable here ({ex!r}); run it on the GPU machine")
        return 1
    if not torch.cuda.is_available():
        log("compare.py: no CUDA device visible to PyTorch; nothing to compare")
        return 1
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    env = {"torch": torch.__version__, "gpu": props.name, "sm_count": props.multi_processor_count,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "python": sys.version.split()[0]}
    log(f"env: {env}")
    if args.smoke:
        log("SMOKE mode: workloads scaled 1/16, few iterations: checks that everything runs; "
            "the numbers mean nothing")

    ceil = {}
    if not args.no_ceilings:
        ceil = ceilings(torch, dev, fp8=any(m in FP8_TOL for m in methods))
        log(f"ceilings (this run): {ceil}")
    ceiling_tflops = ceil.get("gemm_bf16_8192_tflops")

    # FlashInfer: importable already (gpu-check sources its setup), else the offline copy.
    if any(m in FI_BACKENDS for m in methods) or args.overhead != "none":
        fi_mod, info = peers.load_flashinfer(auto_setup=not args.no_fi_setup)
        FI_STATE.update(mod=fi_mod, why=info, info=info if fi_mod else None)
        env["flashinfer"] = info if fi_mod is not None else None
        log(f"flashinfer: {info}")

    # mlakit: binding first, bench binary second.
    mlakit_mod, mlakit_source, fallback = None, None, {}
    if "mlakit" in methods or "mlakit_nosplit" in methods or "mlakit_fp8" in methods or args.overhead != "none":
        try:
            import mlakit as mlakit_mod  # noqa: F811
            if mlakit_mod.cuda_device_count() == 0:
                why = mlakit_mod.cuda_unavailable_reason()
                mlakit_mod = None
                raise ImportError(f"the binding has no usable CUDA: {why}")
            mlakit_source = f"python binding ({getattr(mlakit_mod, '__file__', '?')})"
        except Exception as ex:  # noqa: BLE001
            mlakit_mod = None
            log(f"mlakit binding not importable ({ex!r}); falling back to mlakit-bench --json")
            binary = find_bench_binary(args.bench_bin)
            if binary is None or args.smoke:
                log("  no mlakit-bench binary found either (--bench-bin, $MLAKIT_BENCH, build-gpu/) "
                    "or --smoke: mlakit skipped")
            elif args.dims:
                # The fallback runs the named workloads by name, at (192, 128): its rows would
                # never match the renamed workloads, so it would only cost minutes.
                log("  --dims: mlakit-bench's fallback times the named (192, 128) workloads only: mlakit skipped")
            else:
                try:
                    fallback = bench_fallback(binary, names, iters, warmup)
                    mlakit_source = (f"mlakit-bench {binary} (its own steady_clock timing, NOT CUDA events: "
                                     "compare with care)")
                except Exception as ex2:  # noqa: BLE001
                    log(f"  mlakit-bench fallback failed: {ex2!r}")
        log(f"mlakit source: {mlakit_source}")

    sampler = None
    if args.clocks:
        try:
            import gpu_clock
            sampler = gpu_clock.ClockSampler()
            log(f"clocks: sampled through {sampler.source}")
        except Exception as ex:  # noqa: BLE001
            log(f"clocks: no sampler ({short(ex)})")
    anchors = load_anchors()
    cases = []
    any_mlakit_fail = False
    for w in wls:
        flops = w.flops()
        per = w.bytes_per_set()
        nsets = args.rotate if args.rotate > 0 else max(1, min(8, math.ceil(2 * L2_BYTES / per)))
        nsets = max(1, min(nsets, int(8 * 2 ** 30 // per)))
        log(f"\n== {w.name}{' (scaled 1/%d)' % w.scale_divisor if w.scale_divisor > 1 else ''}: "
            f"B={w.batch} H={w.heads} q={w.total_q} kv={w.total_kv} causal={w.causal} "
            f"GFLOP={flops / 1e9:.3f} sets={nsets}")
        case = {"workload": w.name, "scale_divisor": w.scale_divisor, "anchor_case": W.ANCHOR_CASE.get(w.name),
                "H": w.heads, "kv_heads": w.kv_heads, "dqk": w.dqk, "dvo": w.dvo, "dtype": w.dtype,
                "tokens_q": w.total_q, "tokens_kv": w.total_kv, "batch": w.batch, "causal": w.causal,
                "gflop": flops / 1e9, "rotate": nsets, "results": {}}
        try:
            sets = make_sets(torch, w, nsets, dev, args.seed)
            rows = sample_rows(w, args.check_rows, args.seed + 1)
            heads = check_heads(w)
            q0, k0, v0 = sets[0]
            ref = reference(torch, w, q0, k0, v0, rows, heads)
        except Exception as ex:  # noqa: BLE001
            log(f"  inputs/reference failed: {ex!r}")
            case["error"] = repr(ex)
            cases.append(case)
            continue
        tol = 1e-2 if w.dtype == "bf16" else 2e-3
        sets8 = ref8 = None
        if any(m in FP8_TOL for m in methods):
            try:
                sets8, deq = fp8_sets(torch, w, sets)
                ref8 = reference(torch, w, *deq, rows, heads)
                del deq
            except Exception as ex:  # noqa: BLE001
                log(f"  FP8 inputs/reference failed: {short(ex)}")

        for m in methods:
            res = {}
            try:
                if m in ("mlakit_nosplit", "mlakit_fp8") and mlakit_mod is None:
                    raise Skip("needs the mlakit binding")
                if m in FP8_TOL and sets8 is None:
                    raise Skip("no FP8 inputs (see above)")
                if m == "mlakit" and mlakit_mod is None:
                    r = fallback.get(w.name)
                    if r is None:
                        raise Skip("no mlakit binding and no mlakit-bench result")
                    if not r.get("ok", False):
                        raise Skip("mlakit-bench: " + r.get("error", "failed"))
                    res = {"ms": r["ms"], "tflops": r["tflops"], "relerr": r.get("relerr"),
                           "source": "mlakit-bench"}
                else:
                    built = build_method(torch, m, w, sets, sets8, dev, mlakit_mod, args)
                    run, to_ragged, ctx = built[:3]
                    ctx = ctx or NullCtx()
                    runner = built[3] if len(built) > 3 else Runner()
                    with ctx:
                        out = to_ragged(run(0))
                        torch.cuda.synchronize()
                        err = relerr(torch, out, ref8 if m in FP8_TOL else ref, rows, heads)
                        del out
                        window = []
                        ms, wall = time_cuda(torch, run, nsets, warmup, iters, args.gap_ms, window)
                    res = {"ms": ms, "tflops": flops / (ms * 1e-3) / 1e12, "sync_wall_ms": wall,
                           "relerr": err}
                    if sampler is not None and window:
                        res.update(sampler.stats(*window) or {})
                    for kind, fn in runner.plan_fns.items():
                        try:
                            res[f"plan_us_{kind}_indptr"] = time_plan(torch, fn, plan_iters)
                        except Exception as ex:  # noqa: BLE001
                            res[f"plan_us_{kind}_indptr"] = None
                            log(f"  {m}: plan() with {kind} indptr failed: {short(ex)}")
                    del runner, built
                set_rates(res, m, case, args, ceiling_tflops, ceil)
                m_tol = FP8_TOL.get(m, tol)
                res["check"] = "PASS" if (res.get("relerr") is not None and res["relerr"] <= m_tol) else "FAIL"
                if m in ("mlakit", "mlakit_fp8") and res["check"] != "PASS":
                    any_mlakit_fail = True
                plans = " ".join(f"plan[{k[8:-7]}] {fmt(v, '.1f')} us" for k, v in res.items()
                                 if k.startswith("plan_us_"))
                clk = (f"  {res['sm_clock_mhz']:.0f} MHz {res['power_w']:.0f} W" if "sm_clock_mhz" in res else "")
                log(f"  {m:16s} {res['ms']:9.4f} ms {res['tflops']:7.1f} TFLOP/s "
                    f"relerr {fmt(res.get('relerr'), '.1e')} {res['check']}{clk}{'  ' + plans if plans else ''}")
            except Skip as ex:
                res = {"skipped": str(ex)}
                log(f"  {m:16s} skipped: {ex}")
            except Exception as ex:  # noqa: BLE001
                res = {"skipped": f"error: {short(ex)}"}
                log(f"  {m:16s} skipped after an error: {short(ex)}")
                traceback.print_exc(limit=3)
                if m in ("mlakit", "mlakit_fp8"):
                    any_mlakit_fail = True
            case["results"][m] = res
            torch.cuda.synchronize()
        if args.turns > 1:
            more_turns(torch, case, methods, w, sets, sets8, dev, mlakit_mod, args, nsets, warmup, iters, flops,
                       ceiling_tflops, ceil)
        del sets, ref, sets8, ref8
        torch.cuda.empty_cache()
        cases.append(case)

    if sampler is not None:
        sampler.close()
    # Per-call cost.
    overhead_rows = None
    if args.overhead != "none":
        ow = W.find(args.overhead)
        if ow is None:
            log(f"--overhead {args.overhead!r}: not a named workload; skipped")
        else:
            try:
                overhead_rows = OH.run_overheads(torch, ow, mlakit_mod, FI_STATE["mod"],
                                                 lambda: fi_workspace(torch, dev), max(iters, 20), log)
            except Exception as ex:  # noqa: BLE001
                log(f"per-call cost measurement failed: {short(ex)}")
                traceback.print_exc(limit=3)

    try:
        report(cases, anchors, ceil, args.peak_tflops, mlakit_source)
    except Exception as ex:  # noqa: BLE001  (the JSON below must still be written)
        log(f"printing the table failed: {ex!r}")
        traceback.print_exc(limit=3)

    if args.json:
        doc = {"tool": "bench/compare.py", "time_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "command_line": " ".join(sys.argv), "env": env, "ceilings": ceil, "smoke": args.smoke,
               "peak_tflops": args.peak_tflops, "mlakit_source": mlakit_source,
               "method": f"median of {iters} CUDA-event-timed calls after {warmup} warm-ups"
                         + (f", per turn; {args.turns} turns, the methods in turns (turn t starts at method t), "
                            "ms = median of the turns (ms_turns); " if args.turns > 1 else "; ")
                         + "rotating input sets (see 'rotate' per case); tflops = 2*(Dqk+Dvo)*pairs*H / time; "
                         "pct_ceiling = tflops / this run's 8192^3 bf16 matmul TFLOP/s; "
                         "mlakit_fp8: pct_fp8_ceiling = tflops / this run's 8192^3 e4m3 _scaled_mm TFLOP/s, "
                         "speedup_vs_mlakit_bf16 = mlakit ms / mlakit_fp8 ms; "
                         f"plan_us_* = median host wall of {plan_iters} plan() calls, device idle before each",
               "git_commit": R.git_commit(), "source_digest": R.source_digest(),
               "cases": cases, "overhead": overhead_rows,
               "overhead_method": OH.__doc__.strip() if overhead_rows is not None else None}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(R.finite_or_none(doc), f, indent=1, default=lambda o: None)
        log(f"wrote {args.json}")
    return 1 if any_mlakit_fail else 0


if __name__ == "__main__":
    sys.exit(main())
