"""Pluggable "paths" for bench/compare_mla.py: one engine's way through the prefill attention of
one step of an MLA model (cache write, up-projection, attention over the new tokens and over the
cached context, merge), as PyTorch re-creations.

The interface (every path):
    setup()            once: allocate workspaces; raise Skip("why") when it cannot run here
    plan(st)           once per engine step, on the host (timed with the step): st is a
                       mla_model.StepInputs (host lengths, device slot_mapping/block_table/qo_indptr)
    layer(l, st)       one layer (timed, called for l = 0 .. layers-1 after plan): returns
                       out [T, H, v_head] (layer 0's output is checked against the reference)
    graph_key(st)      (graph-capturable paths only) what fixes the shapes a captured graph saw:
                       steps with equal keys replay one graph after plan()
    run_step(st)       plan + every layer; returns layer 0's output
GraphedPath(inner) captures inner's layer loop into one CUDA graph per graph_key and replays it.

Paths:
  fa2_vllm            vLLM's MLA prefill with FA2 (torch.ops.aten._flash_attention_forward): new
                      tokens up-projected, K = cat(k_nope, k_pe broadcast), V padded 128 -> 192,
                      causal varlen; context: latents gathered through the block table,
                      up-projected, non-causal varlen with LSE; merged with the new-token result
                      by LSE (on the padded outputs, as vLLM), output sliced to 128
  flashinfer_fa3/fa2  the seed's change: the same, with FlashInfer's ragged prefill wrapper (no V
                      pad) planned once per step (new tokens, and the context when there is one);
                      plan cost inside the step; device indptr as vLLM passes (--fi-indptr)
  mlakit_placeholder  the same path with mlakit's RaggedPrefill kernel (no V pad, host plan) and
                      mlakit.merge_states: what mlakit can do today (the anchors' "same path with
                      mlakit's kernel"); _graph: its layer loop captured, one graph per (T, context)
  mlakit_step         mlakit's own MLA step (issue 7), when the binding has it (see MlakitStepPath
                      for the interface expected); _graph: one graph per T, replayed after plan()
"""
from __future__ import annotations

import inspect
import os
import sys

import torch

import mla_model as M

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


class Skip(Exception):
    """The path cannot run here; the message says why."""


class Capacity:
    def __init__(self, max_batch, max_tokens, max_ctx_tokens, max_blocks, num_blocks):
        self.max_batch, self.max_tokens = max_batch, max_tokens
        self.max_ctx_tokens, self.max_blocks, self.num_blocks = max_ctx_tokens, max_blocks, num_blocks


class Path:
    name = "base"

    def __init__(self, cfg: M.MLAConfig, model: M.ModelData, caps: Capacity):
        self.cfg, self.model, self.caps = cfg, model, caps
        self.dev = model.dev

    def setup(self):
        pass

    def plan(self, st):
        raise NotImplementedError

    def layer(self, l, st):
        raise NotImplementedError

    def graph_key(self, st):
        raise Skip(f"{self.name} is not graph-capturable")

    def run_step(self, st):
        self.plan(st)
        out0 = None
        for l in range(self.cfg.layers):
            o = self.layer(l, st)
            if l == 0:
                out0 = o
        return out0

    def describe(self):
        return self.__doc__.strip().splitlines()[0] if self.__doc__ else self.name


def _h2d(t, dev):
    """Host tensor -> device, asynchronously from pinned memory as engines copy metadata."""
    if dev.type != "cuda":
        return t
    return t.pin_memory().to(dev, non_blocking=True)


# ------------------------------------------------------------------------------------------------

def fa2_lse_TH(lse, T):
    """FA2's varlen LSE ([H, total_q] in PyTorch's flash_api) as a [T, H] view."""
    if lse.dim() == 2 and lse.shape[1] == T:
        return lse.t()
    if lse.dim() == 2 and lse.shape[0] == T:
        return lse
    raise RuntimeError(f"unexpected FA2 LSE shape {tuple(lse.shape)} for {T} query rows")


def naive_varlen(q, k, v, cu_q, cu_k, causal, scale):
    """FA2's varlen contract on any device, for the CPU self-test: out [T, H, Dv], LSE [H, T]
    natural log, +inf for rows without keys (as FA2 writes it), causal bottom-right aligned."""
    T, H = q.shape[0], q.shape[1]
    out = torch.zeros(T, H, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((H, T), float("inf"), dtype=torch.float32, device=q.device)
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        if q1 == q0 or k1 == k0:
            continue
        s = torch.einsum("nhd,khd->hnk", q[q0:q1].float(), k[k0:k1].float()) * scale
        if causal:
            i = torch.arange(q1 - q0, device=q.device).view(1, -1, 1)
            j = torch.arange(k1 - k0, device=q.device).view(1, 1, -1)
            s = s.masked_fill(j > i + (k1 - k0) - (q1 - q0), float("-inf"))
        l_ = torch.logsumexp(s, dim=-1)
        out[q0:q1] = torch.einsum("hnk,khd->nhd", torch.exp(s - l_.unsqueeze(-1)), v[k0:k1].float()).to(q.dtype)
        lse[:, q0:q1] = l_
    return out, lse


class FA2Path(Path):
    """vLLM's MLA prefill, FA2 varlen with V padded to 192, context merged by LSE."""
    name = "fa2_vllm"

    def setup(self):
        if self.dev.type == "cuda":
            if not hasattr(torch.ops.aten, "_flash_attention_forward"):
                raise Skip("torch.ops.aten._flash_attention_forward missing in this PyTorch")
            self.emulated = False
        else:
            self.emulated = True  # CPU self-test: FA2's contract from naive attention

    def attn(self, q, k, v, cu_q, cu_k, cu_q_host, cu_k_host, max_q, max_k, causal):
        if self.emulated:
            return naive_varlen(q, k, v, cu_q_host, cu_k_host, causal, self.cfg.sm_scale)
        r = torch.ops.aten._flash_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, causal, False,
                                                    scale=self.cfg.sm_scale)
        return r[0], r[1]

    def plan(self, st):
        # What vLLM's metadata builder adds for the context chunk: its cu_seqlens and (in vLLM,
        # inside gather_cache) the cache rows to read.
        self.has_ctx = st.ctx_total > 0
        if self.has_ctx:
            self.cu_k_ctx = _h2d(st.ctx_indptr_host, self.dev)
            self.gidx = _h2d(M.context_gather_index(st), self.dev)

    def layer(self, l, st):
        cfg, L, T = self.cfg, self.model.layers[l], st.T
        q, kv_c, k_pe = L.q[:T], L.kv_c[:T], L.k_pe[:T]
        M.write_cache(L, st.slot_mapping, kv_c, k_pe, cfg)
        k, v = M.up_project(L, kv_c, k_pe, cfg)
        pad = cfg.dqk - cfg.v_head
        F = torch.nn.functional
        out, lse = self.attn(q, k, F.pad(v, (0, pad)), st.qo_indptr_dev, st.qo_indptr_dev,
                             st.qo_indptr, st.qo_indptr, st.max_q, st.max_q, True)
        if self.has_ctx:
            lat = L.cache_flat.index_select(0, self.gidx)
            kc, vc = M.up_project(L, lat[:, :cfg.kv_lora_rank], lat[:, cfg.kv_lora_rank:], cfg)
            oc, lc = self.attn(q, kc, F.pad(vc, (0, pad)), st.qo_indptr_dev, self.cu_k_ctx,
                               st.qo_indptr, st.ctx_indptr, st.max_q, st.max_ctx, False)
            out = M.merge(oc, fa2_lse_TH(lc, T), out, fa2_lse_TH(lse, T))
        return out[..., :cfg.v_head]


# ------------------------------------------------------------------------------------------------

_FI = {}


class FlashInferPath(Path):
    """The seed's change: FlashInfer ragged prefill planned once per step, context merged by LSE."""

    def __init__(self, cfg, model, caps, backend="fa3", indptr="device"):
        super().__init__(cfg, model, caps)
        self.backend, self.indptr = backend, indptr
        self.name = f"flashinfer_{backend}"

    def setup(self):
        if self.dev.type != "cuda":
            raise Skip("FlashInfer needs CUDA")
        if "mod" not in _FI:
            import peers
            _FI["mod"], _FI["info"] = peers.load_flashinfer(auto_setup=not os.environ.get("MLAKIT_NO_FI_SETUP"))
        if _FI["mod"] is None:
            raise Skip(_FI["info"])
        from flashinfer.prefill import BatchPrefillWithRaggedKVCacheWrapper
        if "ws" not in _FI:
            # One float workspace for every wrapper, as vLLM shares its prefill workspace.
            _FI["ws"] = torch.empty(512 << 20, dtype=torch.uint8, device=self.dev)
        self.new = BatchPrefillWithRaggedKVCacheWrapper(_FI["ws"], "NHD", backend=self.backend)
        self.ctx = BatchPrefillWithRaggedKVCacheWrapper(_FI["ws"], "NHD", backend=self.backend)

    def _plan(self, w, qo, kv, causal):
        c = self.cfg
        w.plan(qo, kv, c.heads, c.heads, c.dqk, head_dim_vo=c.v_head, causal=causal, sm_scale=c.sm_scale,
               q_data_type=self.model.dtype)

    def plan(self, st):
        self.has_ctx = st.ctx_total > 0
        qo = st.qo_indptr_dev if self.indptr == "device" else st.qo_indptr_host
        self._plan(self.new, qo, qo, True)
        if self.has_ctx:
            ctx = _h2d(st.ctx_indptr_host, self.dev) if self.indptr == "device" else st.ctx_indptr_host
            self._plan(self.ctx, qo, ctx, False)
            self.gidx = _h2d(M.context_gather_index(st), self.dev)

    def layer(self, l, st):
        cfg, L, T = self.cfg, self.model.layers[l], st.T
        q, kv_c, k_pe = L.q[:T], L.kv_c[:T], L.k_pe[:T]
        M.write_cache(L, st.slot_mapping, kv_c, k_pe, cfg)
        k, v = M.up_project(L, kv_c, k_pe, cfg)
        if not self.has_ctx:
            return self.new.run(q, k, v)
        out, lse = self.new.run(q, k, v, return_lse=True)
        lat = L.cache_flat.index_select(0, self.gidx)
        kc, vc = M.up_project(L, lat[:, :cfg.kv_lora_rank], lat[:, cfg.kv_lora_rank:], cfg)
        oc, lc = self.ctx.run(q, kc, vc, return_lse=True)
        return M.merge(oc, lc, out, lse, base2=True)  # FlashInfer's LSE is base 2


# ------------------------------------------------------------------------------------------------

def _mlakit():
    try:
        import mlakit
    except Exception as ex:  # noqa: BLE001
        raise Skip(f"mlakit not importable: {ex!r}")
    return mlakit


class MlakitPlaceholderPath(Path):
    """vLLM's path with mlakit's ragged prefill kernel and merge_states (no V pad, host plan)."""
    name = "mlakit_placeholder"

    def setup(self):
        mlakit = _mlakit()
        if self.dev.type == "cuda" and mlakit.cuda_device_count() == 0:
            raise Skip(f"mlakit binding without usable CUDA: {mlakit.cuda_unavailable_reason()}")
        c, k = self.cfg, self.caps
        common = dict(dtype=self.model.dtype, device=str(self.dev) if self.dev.type == "cpu" else "cuda",
                      max_batch=k.max_batch, max_q_tokens=k.max_tokens)
        # Fixed capacities: plan() never reallocates, so captured graphs stay valid.
        self.new = mlakit.RaggedPrefill(c.heads, c.heads, c.dqk, c.v_head, max_kv_tokens=k.max_tokens, **common)
        self.ctx = mlakit.RaggedPrefill(c.heads, c.heads, c.dqk, c.v_head, max_kv_tokens=max(1, k.max_ctx_tokens),
                                        **common)
        self.merge_states = mlakit.merge_states
        self.gidx_buf = torch.zeros(max(1, k.max_ctx_tokens), dtype=torch.int64, device=self.dev)

    def plan(self, st):
        c = self.cfg
        self.has_ctx = st.ctx_total > 0
        self.new.plan(st.qo_indptr_host, st.qo_indptr_host, causal=True, sm_scale=c.sm_scale)
        if self.has_ctx:
            self.ctx.plan(st.qo_indptr_host, st.ctx_indptr_host, causal=False, sm_scale=c.sm_scale)
            self.gidx = self.gidx_buf[:st.ctx_total]  # fixed address for graph replays
            self.gidx.copy_(M.context_gather_index(st).pin_memory() if self.dev.type == "cuda"
                            else M.context_gather_index(st), non_blocking=True)

    def layer(self, l, st):
        cfg, L, T = self.cfg, self.model.layers[l], st.T
        q, kv_c, k_pe = L.q[:T], L.kv_c[:T], L.k_pe[:T]
        M.write_cache(L, st.slot_mapping, kv_c, k_pe, cfg)
        k, v = M.up_project(L, kv_c, k_pe, cfg)
        if not self.has_ctx:
            return self.new.run(q, k, v)
        out, lse = self.new.run(q, k, v, return_lse=True)
        lat = L.cache_flat.index_select(0, self.gidx)
        kc, vc = M.up_project(L, lat[:, :cfg.kv_lora_rank], lat[:, cfg.kv_lora_rank:], cfg)
        oc, lc = self.ctx.run(q, kc, vc, return_lse=True)
        self.merge_states(oc, lc, out, lse, out=oc, lse_out=lc)  # in place into the context part
        return oc

    def graph_key(self, st):
        # Shapes every op of the layer loop saw: T rows, ctx_total gathered rows (mlakit reads the
        # batch from its plan workspace; today it needs tensors sized to the plan: issue 8).
        return (st.T, st.ctx_total)


# ------------------------------------------------------------------------------------------------

MLA_STEP_CLASS_NAMES = ("MLAPrefillStep", "MLAPrefill", "MLAStep")


class MlakitStepPath(Path):
    """mlakit's own MLA prefill step (issue 7), through its Python binding.

    Expected interface (names the adapter looks for; keyword arguments a signature lacks are
    not passed, so block_table/slot_mapping may live in plan() or in run()):

        step = mlakit.MLAPrefillStep(            # or MLAPrefill / MLAStep, in mlakit or mlakit.torch
            num_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
            v_head_dim=128, block_size=16, dtype=torch.bfloat16, device="cuda",
            max_batch=B, max_q_tokens=T, max_context_tokens=C, max_blocks_per_seq=M,
            num_blocks=N)
        step.plan(query_lens, context_lens, *, sm_scale=None)
            # host int32 tensors [B]: new tokens and cached tokens per request; host only, no sync
            # (block_table=, slot_mapping= accepted here too if the binding takes them at plan)
        out = step.run(q, kv_c, k_pe, kv_cache, kv_b_proj, *, block_table, slot_mapping, out=None)
            # q [T, H, 192] bf16 (RoPE applied); kv_c [T, 512]; k_pe [T, 64]; kv_cache
            # [num_blocks, block_size, 576] (new latents written at slot_mapping, context read
            # through block_table); kv_b_proj [H*(128+128), 512]; block_table int32 [>= B, >= M]
            # (device, rows past B ignored); slot_mapping int64 [T] (device); out [T, H, 128]
    One plan per step serves all layers; run() only launches, so the layer loop is captured into a
    CUDA graph per token count T and replayed after plan() with other lengths.
    """
    name = "mlakit_step"

    def setup(self):
        mlakit = _mlakit()
        cls = None
        for mod_name in ("mlakit", "mlakit.torch"):
            try:
                mod = __import__(mod_name, fromlist=["_"])
            except Exception:  # noqa: BLE001
                continue
            for n in MLA_STEP_CLASS_NAMES:
                if hasattr(mod, n):
                    cls = getattr(mod, n)
                    self.binding = f"{mod_name}.{n}"
                    break
            if cls is not None:
                break
        if cls is None:
            raise Skip("mlakit has no MLA step binding yet (issue 7; looked for "
                       + ", ".join(MLA_STEP_CLASS_NAMES) + ")")
        if self.dev.type == "cuda" and mlakit.cuda_device_count() == 0:
            raise Skip(f"mlakit binding without usable CUDA: {mlakit.cuda_unavailable_reason()}")
        c, k = self.cfg, self.caps
        self.step = cls(**_accepted(cls, dict(
            num_heads=c.heads, kv_lora_rank=c.kv_lora_rank, qk_nope_head_dim=c.qk_nope,
            qk_rope_head_dim=c.qk_rope, v_head_dim=c.v_head, block_size=c.block_size,
            dtype=self.model.dtype, device="cuda" if self.dev.type == "cuda" else "cpu",
            max_batch=k.max_batch, max_q_tokens=k.max_tokens, max_context_tokens=max(1, k.max_ctx_tokens),
            max_blocks_per_seq=k.max_blocks, num_blocks=k.num_blocks)))
        self.plan_kw = _param_names(self.step.plan)
        self.run_kw = _param_names(self.step.run)

    def plan(self, st):
        kw = {"sm_scale": self.cfg.sm_scale, "block_table": st.block_table, "slot_mapping": st.slot_mapping}
        self.step.plan(torch.tensor(st.q_lens, dtype=torch.int32), torch.tensor(st.ctx_lens, dtype=torch.int32),
                       **_only(kw, self.plan_kw))

    def layer(self, l, st):
        L, T = self.model.layers[l], st.T
        kw = {"block_table": st.block_table, "slot_mapping": st.slot_mapping}
        out = self.step.run(L.q[:T], L.kv_c[:T], L.k_pe[:T], L.cache, L.w_kvb, **_only(kw, self.run_kw))
        return out[0] if isinstance(out, tuple) else out

    def graph_key(self, st):
        return (st.T,)


def _param_names(fn):
    """Keyword names fn accepts; None when unknown (a native function without a signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def _only(kw, names):
    return dict(kw) if names is None else {k: v for k, v in kw.items() if k in names}


def _accepted(cls, kw):
    return _only(kw, _param_names(cls))


# ------------------------------------------------------------------------------------------------

class GraphedPath(Path):
    """inner's layer loop captured into one CUDA graph per inner.graph_key(st), replayed after
    inner.plan(st). Capture happens the first time a key is seen (the warm-up pass); the
    timed passes only plan and replay."""

    def __init__(self, inner: Path):
        super().__init__(inner.cfg, inner.model, inner.caps)
        self.inner = inner
        self.name = inner.name + "_graph"
        self.graphs = {}

    def setup(self):
        if self.dev.type != "cuda":
            raise Skip("CUDA graphs need CUDA")
        self.inner.setup()

    def plan(self, st):
        self.inner.plan(st)

    def layer(self, l, st):
        raise RuntimeError("GraphedPath runs whole steps")

    def run_step(self, st):
        self.inner.plan(st)
        key = self.inner.graph_key(st)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = self._capture(st)
        entry[0].replay()
        return entry[1]

    def _capture(self, st):
        layers = self.cfg.layers
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside capture (cuBLAS handles, allocator)
            for l in range(layers):
                self.inner.layer(l, st)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out0 = None
            for l in range(layers):
                o = self.inner.layer(l, st)
                if l == 0:
                    out0 = o
        return g, out0


PATH_NAMES = ["fa2_vllm", "flashinfer_fa3", "flashinfer_fa2", "mlakit_placeholder",
              "mlakit_placeholder_graph", "mlakit_step", "mlakit_step_graph"]


def make_path(name, cfg, model, caps, fi_indptr="device"):
    if name == "fa2_vllm":
        return FA2Path(cfg, model, caps)
    if name.startswith("flashinfer_"):
        return FlashInferPath(cfg, model, caps, backend=name.split("_", 1)[1], indptr=fi_indptr)
    if name == "mlakit_placeholder":
        return MlakitPlaceholderPath(cfg, model, caps)
    if name == "mlakit_placeholder_graph":
        return GraphedPath(MlakitPlaceholderPath(cfg, model, caps))
    if name == "mlakit_step":
        return MlakitStepPath(cfg, model, caps)
    if name == "mlakit_step_graph":
        return GraphedPath(MlakitStepPath(cfg, model, caps))
    raise ValueError(f"unknown path {name!r}; known: {', '.join(PATH_NAMES)}")

