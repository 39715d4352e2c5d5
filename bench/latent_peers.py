"""The methods bench/compare_latent.py times beside mlakit's LatentAttention, on one workload's
inputs (latent_workloads.Inputs). Each build_* returns a Built: run() launches one call (what is
timed), view(output) gives [T, H, 512] for the reference check, plan() (optional) is the host
planning a step does once for all layers, timed apart.

  flashmla            FlashMLA flash_mla_with_kvcache, dense paged decode/extend (page 64, the
                      only page its kernel takes: the cache itself); its schedule comes from
                      get_mla_metadata() and is filled by the first call, made before timing, and
                      reused by the timed calls (same shapes and cache_seqlens, as FlashMLA allows)
  flashmla_sparse     FlashMLA flash_mla_sparse_fwd (bf16 cache viewed flat [slots, 1, 576],
                      indices as global slots); heads other than 64 / 128 padded to the next of
                      them as vLLM does (q copied into a zeroed padded buffer inside the timed call,
                      out sliced back as a view)
  flashmla_fp8        FlashMLA flash_mla_with_kvcache(is_fp8_kvcache=True, indices=...): its sparse
                      decode kernel on the fp8_ds_mla cache (fp8 workloads; the one FP8 path
                      FlashMLA has on Hopper, which SGLang also runs for FP8 prefill), indices as
                      global slots [b, s_q, topk]; heads padded to 64 / 128 as vLLM pads them
  flashinfer_<b>_p<P> FlashInfer BatchMLAPagedAttentionWrapper, backend b (fa3, fa2), page size P
                      (the 64-row blocks viewed as 64/P pages); planned once, run() timed
  torch_sdpa          PyTorch floor: the latent rows gathered through the block table
                      (index_select; sparse: the indexed rows, in chunks of query tokens), then
                      scaled_dot_product_attention with one KV head (heads x new tokens as the query
                      rows), V = the first 512 columns; a causal / padding mask built before timing
  torch_matmul        the same gather, scores by torch.matmul (rounded to bf16, as any bf16 matmul
                      path), softmax in float32, P V by torch.matmul

FlashMLA comes from the offline copy (.peers/flashmla: its setup_flashmla.sh unpacks it and exports
PYTHONPATH; load_flashmla() runs it when `import flash_mla` fails), FlashInfer through
bench/peers.py's loader.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers  # noqa: E402
from latent_workloads import BS, D, L, SCALE  # noqa: E402

FI_WORKSPACE_BYTES = 128 << 20  # FlashInfer's recommended MLA workspace
SPARSE_CHUNK_BYTES = 1 << 29    # the PyTorch sparse floor gathers at most this much per chunk


class Skip(Exception):
    """A method that does not apply to a workload or cannot run here; the message says why."""


class NotApplicable(Skip):
    """A method for other workloads (dense only, sparse only): left out of the tables."""


class Built:
    def __init__(self, run, view=None, plan=None, note=""):
        self.run = run
        self.view = view or (lambda o: o)
        self.plan = plan
        self.note = note


# ----------------------------------------------------------------------------------------------
# Loading the peers.

def flashmla_dir():
    """The offline FlashMLA copy's folder (it holds setup_flashmla.sh), or None."""
    return peers.offline_peer_dir("flashmla", "MLAKIT_FMLA_DIR")


def load_flashmla(auto_setup=True):
    """(flash_mla module, description) or (None, reason). gpu-check's peers step sources the
    setup first (then the import succeeds at once); otherwise the offline copy is unpacked into
    $FMLA_SITE (default /tmp/site_flashmla) by its own script."""
    try:
        import flash_mla
        return flash_mla, f"flash_mla from {os.path.dirname(flash_mla.__file__)}"
    except Exception as ex:  # noqa: BLE001
        first = ex
    if not auto_setup:
        return None, f"flash_mla not importable ({first!r}); setup disabled"
    d = flashmla_dir()
    if d is None:
        return None, f"flash_mla not importable ({first!r}) and no offline copy (.peers/flashmla; MLAKIT_FMLA_DIR)"
    site = os.environ.get("FMLA_SITE", "/tmp/site_flashmla")
    try:
        if not os.path.isfile(os.path.join(site, "flash_mla", "__init__.py")):
            peers._env_after(os.path.join(d, "setup_flashmla.sh"), {"FMLA_SITE": site, "FMLA_PYTHON": sys.executable})
        if site not in sys.path:
            sys.path.insert(0, site)
        os.environ["PYTHONPATH"] = site + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
        for name in [m for m in sys.modules if m == "flash_mla" or m.startswith("flash_mla.")]:
            del sys.modules[name]
        import flash_mla  # noqa: F811
        return flash_mla, f"flash_mla from {os.path.dirname(flash_mla.__file__)} (unpacked from {d})"
    except Exception as ex:  # noqa: BLE001
        return None, f"flash_mla not importable ({first!r}); the offline setup from {d} failed: {ex}"


class PeerState:
    """The peers' modules (or why not), loaded once per run and only on a CUDA device."""

    def __init__(self, torch, dev, want_fmla, want_fi, auto_setup=True):
        self.fmla = self.fi = None
        self.fmla_why = self.fi_why = "not asked for"
        self._ws = None
        self.torch, self.dev = torch, dev
        cuda = dev.type == "cuda"
        if want_fmla:
            self.fmla, self.fmla_why = load_flashmla(auto_setup) if cuda else (None, "needs a CUDA device")
        if want_fi:
            self.fi, self.fi_why = peers.load_flashinfer(auto_setup=auto_setup) if cuda else (None, "needs a CUDA device")

    def fi_workspace(self):
        if self._ws is None:
            self._ws = self.torch.empty(FI_WORKSPACE_BYTES, dtype=self.torch.uint8, device=self.dev)
        return self._ws


# ----------------------------------------------------------------------------------------------
# FlashMLA.

def build_flashmla(torch, st, w, inp):
    if w.sparse:
        raise NotApplicable("dense workloads only (sparse: flashmla_sparse)")
    if st.fmla is None:
        raise Skip(st.fmla_why)
    fm = st.fmla
    q4 = inp.q.view(w.batch, w.q_len, w.heads, D)
    k4 = inp.cache.view(inp.num_blocks, BS, 1, D)
    seqlens = inp.kv_lens_h.to(inp.q.device)
    sched, _ = fm.get_mla_metadata()
    causal = w.causal

    def run():
        return fm.flash_mla_with_kvcache(q4, k4, inp.table, seqlens, L, sched, None, softmax_scale=SCALE, causal=causal)

    return Built(run, lambda o: o[0].view(w.total_q, w.heads, L))


def build_flashmla_sparse(torch, st, w, inp):
    if not w.sparse:
        raise NotApplicable("sparse workloads only")
    if st.fmla is None:
        raise Skip(st.fmla_why)
    if w.topk % 128:
        raise Skip(f"topk {w.topk}: FlashMLA's sm90 sparse prefill needs a multiple of 128")
    if w.heads > 128:
        raise Skip("more than 128 heads")
    fm = st.fmla
    kv = inp.cache.view(-1, 1, D)
    idx = inp.slots.view(w.total_q, 1, w.topk)
    hp = 64 if w.heads <= 64 else 128
    if hp == w.heads:
        def run():
            return fm.flash_mla_sparse_fwd(inp.q, kv, idx, SCALE, L)
        return Built(run, lambda o: o[0])
    qp = torch.zeros(w.total_q, hp, D, device=inp.q.device, dtype=inp.q.dtype)

    def run_padded():
        qp[:, :w.heads].copy_(inp.q)
        return fm.flash_mla_sparse_fwd(qp, kv, idx, SCALE, L)

    return Built(run_padded, lambda o: o[0][:, :w.heads], note=f"heads padded {w.heads} -> {hp}")


def build_flashmla_fp8(torch, st, w, inp):
    if w.fp8 != "ds_mla" or not w.sparse:
        raise NotApplicable("sparse fp8_ds_mla workloads only (FlashMLA has no dense FP8 kernel on Hopper)")
    if st.fmla is None:
        raise Skip(st.fmla_why)
    if w.topk % 64:
        raise Skip(f"topk {w.topk}: FlashMLA's FP8 sparse decode needs a multiple of 64")
    fm = st.fmla
    hp = 64 if w.heads <= 64 else 128
    k4 = inp.cache_fp8.view(inp.num_blocks, BS, 1, inp.cache_fp8.shape[-1])
    idx = inp.slots.view(w.batch, w.q_len, w.topk)
    sched, _ = fm.get_mla_metadata()
    q4 = inp.q.view(w.batch, w.q_len, w.heads, D)
    if hp != w.heads:
        qp = torch.zeros(w.batch, w.q_len, hp, D, device=inp.q.device, dtype=inp.q.dtype)

    def run():
        q = q4
        if hp != w.heads:
            qp[:, :, :w.heads].copy_(q4)
            q = qp
        return fm.flash_mla_with_kvcache(q, k4, None, None, L, sched, None, softmax_scale=SCALE, causal=False,
                                         is_fp8_kvcache=True, indices=idx)

    note = f"heads padded {w.heads} -> {hp}" if hp != w.heads else ""
    return Built(run, lambda o: o[0][:, :, :w.heads].reshape(w.total_q, w.heads, L), note=note)


# ----------------------------------------------------------------------------------------------
# FlashInfer.

def build_flashinfer(torch, st, w, inp, backend, page):
    if w.sparse:
        raise NotApplicable("dense workloads only")
    if st.fi is None:
        raise Skip(st.fi_why)
    if page < 1 or BS % page:
        raise Skip(f"page {page} does not divide the cache's {BS}-row blocks")
    from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata
    dev = inp.q.device
    per = BS // page
    n_pages = [(k + page - 1) // page for k in w.kv_lens]
    indices = []
    for b, n in enumerate(n_pages):
        sub = torch.arange(n)
        indices.append(inp.table_h[b, sub // per].long() * per + sub % per)
    kv_indices = torch.cat(indices).to(torch.int32).to(dev)
    kv_indptr = torch.tensor([0] + n_pages, dtype=torch.int64).cumsum(0).to(torch.int32).to(dev)
    qo_indptr = torch.arange(0, w.total_q + 1, w.q_len, dtype=torch.int32, device=dev)
    kv_len = inp.kv_lens_h.to(dev)
    cache = inp.cache.view(inp.num_blocks * per, page, D)
    out = torch.empty(w.total_q, w.heads, L, device=dev, dtype=inp.q.dtype)
    wrapper = BatchMLAPagedAttentionWrapper(st.fi_workspace(), backend=backend)
    meta = MLAPlanMetadata.csr(qo_indptr, kv_indptr, kv_indices, kv_len)

    def plan():
        wrapper.plan(metadata=meta, num_heads=w.heads, head_dim_ckv=L, head_dim_kpe=D - L, page_size=page,
                     causal=w.causal, sm_scale=SCALE, q_data_type=inp.q.dtype, kv_data_type=inp.cache.dtype,
                     query_layout="packed", kv_cache_layout="packed")

    plan()  # the first plan loads the module (prebuilt, or a JIT build)

    def run():
        return wrapper.run(query=inp.q, kv_cache=cache, out=out)

    return Built(run, plan=plan)


# ----------------------------------------------------------------------------------------------
# The PyTorch floor.

def _dense_gather_plan(torch, w, inp):
    """Slots of every request's rows padded to the longest (int64 [B * kmax]) and the additive
    mask (None, [B, 1, 1, kmax] padding, [1, 1, q*H, kmax] causal, or both [B, 1, q*H, kmax])."""
    dev = inp.q.device
    kmax = max(inp.pages) * BS
    slots = (inp.table.long().view(w.batch, -1, 1) * BS + torch.arange(BS, device=dev)).view(w.batch, -1)[:, :kmax]
    lens = torch.tensor(w.kv_lens, device=dev).view(-1, 1)
    key = torch.arange(kmax, device=dev).view(1, -1)
    pad = key >= lens                                                        # [B, kmax]
    neg = torch.tensor(float("-inf"), device=dev, dtype=inp.q.dtype)
    zero = torch.zeros((), device=dev, dtype=inp.q.dtype)
    uniform = len(set(w.kv_lens)) == 1 and w.kv_lens[0] == kmax
    if w.causal:
        tok = torch.arange(w.q_len, device=dev).repeat_interleave(w.heads).view(1, -1, 1)     # rows (token, head)
        last = (lens[:1] if uniform else lens).view(-1, 1, 1) - w.q_len + tok
        hidden = key.view(1, 1, -1) > last                                      # [B or 1, q*H, kmax]
        mask = torch.where(hidden, neg, zero).unsqueeze(1)
    elif uniform:
        mask = None
    else:
        mask = torch.where(pad, neg, zero).view(w.batch, 1, 1, kmax)
    return slots.reshape(-1), kmax, mask


def build_torch(torch, st, w, inp, kind):
    F = torch.nn.functional
    flat = inp.cache.view(-1, D)
    rows = w.q_len * w.heads
    if not w.sparse:
        slots, kmax, mask = _dense_gather_plan(torch, w, inp)
        q = inp.q.view(w.batch, 1, rows, D)

        def run():
            kv = flat.index_select(0, slots).view(w.batch, 1, kmax, D)
            if kind == "sdpa":
                return F.scaled_dot_product_attention(q, kv, kv[..., :L], attn_mask=mask, scale=SCALE)
            s = torch.matmul(q, kv.transpose(-1, -2)).float() * SCALE
            if mask is not None:
                s = s + mask
            return torch.matmul(torch.softmax(s, dim=-1).to(q.dtype), kv[..., :L])

        return Built(run, lambda o: o.view(w.total_q, w.heads, L))

    # Sparse: every token its own rows, as a batch of single-head problems, in chunks of tokens.
    chunk = max(1, min(w.total_q, SPARSE_CHUNK_BYTES // (w.topk * D * 2)))
    slots = inp.slots.long()
    out = torch.empty(w.total_q, w.heads, L, device=inp.q.device, dtype=inp.q.dtype)

    def run_sparse():
        for t0 in range(0, w.total_q, chunk):
            t1 = min(w.total_q, t0 + chunk)
            kv = flat.index_select(0, slots[t0:t1].reshape(-1)).view(t1 - t0, 1, w.topk, D)
            q = inp.q[t0:t1].unsqueeze(1)                                           # [c, 1, H, 576]
            if kind == "sdpa":
                o = F.scaled_dot_product_attention(q, kv, kv[..., :L], scale=SCALE)
            else:
                s = torch.matmul(q, kv.transpose(-1, -2)).float() * SCALE
                o = torch.matmul(torch.softmax(s, dim=-1).to(q.dtype), kv[..., :L])
            out[t0:t1] = o.view(t1 - t0, w.heads, L)
        return out

    return Built(run_sparse, note=f"{chunk} tokens per chunk")


def build(torch, st, method, w, inp):
    """The Built of a peer method, or Skip."""
    if method == "flashmla":
        return build_flashmla(torch, st, w, inp)
    if method == "flashmla_sparse":
        return build_flashmla_sparse(torch, st, w, inp)
    if method == "flashmla_fp8":
        return build_flashmla_fp8(torch, st, w, inp)
    if method.startswith("flashinfer_"):
        _, backend, page = method.split("_")
        return build_flashinfer(torch, st, w, inp, backend, int(page[1:]))
    if method in ("torch_sdpa", "torch_matmul"):
        return build_torch(torch, st, w, inp, method[len("torch_"):])
    raise Skip(f"unknown method {method}")
