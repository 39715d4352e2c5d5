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
GraphedPath(inner) captures inner's layer loop into one CUDA graph per graph_key and replays it;
MlakitStepGraphPath captures per token bucket itself (its plan depends on the bucket). Graph paths
expose graphs (captured so far) and graph_bytes (device memory the captures took).

Paths:
  fa2_vllm            vLLM's MLA prefill with FA2 (torch.ops.aten._flash_attention_forward): new
                      tokens up-projected, K = cat(k_nope, k_pe broadcast), V padded 128 -> 192,
                      causal varlen; context: latents gathered through the block table,
                      up-projected, non-causal varlen with LSE; merged with the new-token result
                      by LSE (on the padded outputs, as vLLM), output sliced to 128
  flashinfer_fa3/fa2  the seed's change: the same, with FlashInfer's ragged prefill wrapper (no V
                      pad) planned once per step (new tokens, and the context when there is one);
                      plan cost inside the step; offsets on the device, as vLLM passes them
                      (FlashInfer's plan() then copies them to the host and synchronizes)
  flashinfer_fa3_host the same path at its best: planned from host offsets, as an engine that
                      holds the lengths on the host would call it (no device-to-host copy in plan)
  mlakit_step         mlakit's own MLA step (mlakit.MlaStep): one host plan per step, per
                      layer one run() (cache write, gather of [context; new] latents through the
                      block table, one up-projection GEMM, split-K attention, no merge)
  mlakit_step_graph   the same, all layers captured into one CUDA graph per token bucket
                      (mlakit.graph_rows_bucket), re-planned per step and replayed
  <mlakit step path>@fp8, @fp8_ds_mla   the same mlakit step path on an FP8 latent cache of its
                      own (MlaStep(kv_cache_dtype=...): vLLM's fp8 with layer scale 1.0, or
                      DeepSeek-V3.2's 656-byte rows; uint8 [num_blocks, 16, 576 / 656] per layer),
                      checked against the reference on the latents as that cache holds them
  mlakit_kernel_in_vllm_path   vLLM's Python path above with only the kernel swapped: mlakit's
                      RaggedPrefill (no V pad, host plan) and mlakit.merge_states (what the anchors
                      call "the same path with mlakit's kernel"); _graph: its layer loop captured,
                      one graph per (T, context). Extra rows, not in the default --paths
"""
from __future__ import annotations

import os
import sys
import time

import torch

import mla_model as M
import seed_schedule as S

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


class Skip(Exception):
    """The path cannot run here; the message says why."""


class Capacity:
    # bucket_step: the graph paths' rows per bucket above 1024 (mlakit.graph_rows_bucket).
    def __init__(self, max_batch, max_tokens, max_ctx_tokens, max_blocks, num_blocks,
                 bucket_step=S.GRAPH_BUCKET_STEP_ABOVE):
        self.max_batch, self.max_tokens = max_batch, max_tokens
        self.max_ctx_tokens, self.max_blocks, self.num_blocks = max_ctx_tokens, max_blocks, num_blocks
        self.bucket_step = bucket_step


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

    # The engines' layer loop, shared by the paths that re-create it: layer l's queries and the
    # new tokens' K, V (their latents into the cache, then up-projected) ...
    def _new_tokens(self, l, st):
        cfg, L, T = self.cfg, self.model.layers[l], st.T
        q, kv_c, k_pe = L.q[:T], L.kv_c[:T], L.k_pe[:T]
        M.write_cache(L, st.slot_mapping, kv_c, k_pe, cfg)
        k, v = M.up_project(L, kv_c, k_pe, cfg)
        return q, k, v

    # ... and the context's K, V: its latents gathered from the cache (rows self.gidx), up-projected.
    def _context_kv(self, l):
        cfg, L = self.cfg, self.model.layers[l]
        lat = L.cache_flat.index_select(0, self.gidx)
        return M.up_project(L, lat[:, :cfg.kv_lora_rank], lat[:, cfg.kv_lora_rank:], cfg)

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
        cfg, T = self.cfg, st.T
        q, k, v = self._new_tokens(l, st)
        pad = cfg.dqk - cfg.v_head
        F = torch.nn.functional
        out, lse = self.attn(q, k, F.pad(v, (0, pad)), st.qo_indptr_dev, st.qo_indptr_dev,
                             st.qo_indptr, st.qo_indptr, st.max_q, st.max_q, True)
        if self.has_ctx:
            kc, vc = self._context_kv(l)
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
        self.name = f"flashinfer_{backend}" + ("_host" if indptr == "host" else "")

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
        q, k, v = self._new_tokens(l, st)
        if not self.has_ctx:
            return self.new.run(q, k, v)
        out, lse = self.new.run(q, k, v, return_lse=True)
        kc, vc = self._context_kv(l)
        oc, lc = self.ctx.run(q, kc, vc, return_lse=True)
        return M.merge(oc, lc, out, lse, base2=True)  # FlashInfer's LSE is base 2


# ------------------------------------------------------------------------------------------------

def _mlakit():
    try:
        import mlakit
    except Exception as ex:  # noqa: BLE001
        raise Skip(f"mlakit not importable: {ex!r}")
    return mlakit


class MlakitKernelInVllmPath(Path):
    """vLLM's Python path with mlakit's ragged prefill kernel and merge_states (no V pad, host plan)."""
    name = "mlakit_kernel_in_vllm_path"

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
        q, k, v = self._new_tokens(l, st)
        if not self.has_ctx:
            return self.new.run(q, k, v)
        out, lse = self.new.run(q, k, v, return_lse=True)
        kc, vc = self._context_kv(l)
        oc, lc = self.ctx.run(q, kc, vc, return_lse=True)
        self.merge_states(oc, lc, out, lse, out=oc, lse_out=lc)  # in place into the context part
        return oc

    def graph_key(self, st):
        # Shapes every op of the layer loop saw: T rows, ctx_total gathered rows (mlakit reads the
        # batch from its plan workspace; it needs tensors sized to the plan).
        return (st.T, st.ctx_total)


# ------------------------------------------------------------------------------------------------

class MlakitStepPath(Path):
    """mlakit's MLA step (mlakit.MlaStep): plan once per step on the host, one run() per layer."""
    name = "mlakit_step"
    upload_in_run = False  # MlaStep(upload_in_run=): the plan uploaded by the step's first run()
    kv_cache_dtype = "auto"  # MlaStep(kv_cache_dtype=): "auto" reads the model's bf16 cache
    absorb = -1  # MlaStep(absorb_max_query_len=): -1 the library's choice ("<path>/a<N>" sets N)

    # How the binding is driven (python/mlakit/mla.py, docs/mla.md):
    #   step = mlakit.MlaStep(H, kv_lora_rank, qk_nope, qk_rope, v_head, dtype=, device=, block_size=,
    #                         num_blocks=, max_batch=, max_tokens=, max_context_tokens=, workspace_rows=)
    #   step.plan(query_lens, context_lens, block_table, sm_scale=, graph_rows=)   # host arrays
    #   step.run(q, kv_c, k_pe, kv_b_proj, kv_cache, out=)                         # per layer
    # run() writes the new latents into the cache, gathers [context; new] latents through the block
    # table, up-projects them in one GEMM and attends with K split into K_nope and the shared k_pe:
    # every piece of the engines' layer loop below in one call.

    def setup(self):
        mlakit = _mlakit()
        if not hasattr(mlakit, "MlaStep"):
            raise Skip("this mlakit build has no MlaStep")
        if self.dev.type == "cuda" and mlakit.cuda_device_count() == 0:
            raise Skip(f"mlakit binding without usable CUDA: {mlakit.cuda_unavailable_reason()}")
        c, k = self.cfg, self.caps
        # workspace_rows = new + context capacity: every step of the schedule runs as one causal
        # launch over [context; new] (no context chunks, which a graph could not replay either).
        self.rows_cap = k.max_tokens + k.max_ctx_tokens
        self.absorb_cap = min(k.max_tokens, 512)  # MlaStep's max_absorbed_tokens default
        extra = {"upload_in_run": True} if self.upload_in_run else {}
        self.step = mlakit.MlaStep(c.heads, c.kv_lora_rank, c.qk_nope, c.qk_rope, c.v_head,
                                   dtype=self.model.dtype, device="cuda" if self.dev.type == "cuda" else "cpu",
                                   block_size=c.block_size, num_blocks=k.num_blocks, max_batch=k.max_batch,
                                   max_tokens=k.max_tokens, max_context_tokens=k.max_ctx_tokens,
                                   workspace_rows=self.rows_cap, kv_cache_dtype=self.kv_cache_dtype,
                                   absorb_max_query_len=self.absorb, **extra)
        # An FP8 cache per layer (uint8, as vLLM allocates them) and the fp8 layer scale; "auto"
        # uses the model's bf16 caches.
        self.caches, self.k_scale = None, None
        if self.kv_cache_dtype != "auto":
            row = M.cache_row_bytes(c, self.kv_cache_dtype, self.model.dtype)
            self.caches = [torch.zeros(k.num_blocks, c.block_size, row, dtype=torch.uint8, device=self.dev)
                           for _ in range(c.layers)]
            if self.kv_cache_dtype == "fp8":
                self.k_scale = torch.tensor(M.FP8_K_SCALE, dtype=torch.float32, device=self.dev)
        # Layer 0 writes its own output (checked against the reference after the step); the other
        # layers share one buffer, as an engine's attention output is consumed by o_proj before the
        # next layer runs. Fixed addresses, so a captured graph keeps writing the same buffers.
        shape = (k.max_tokens, c.heads, c.v_head)
        self.out0 = torch.empty(shape, dtype=self.model.dtype, device=self.dev)
        self.out_rest = torch.empty(shape, dtype=self.model.dtype, device=self.dev)

    def describe(self):
        return f"{self.__doc__.strip().splitlines()[0]} ({self.step!r})"

    def reset_cache(self):
        """Zeroes this path's own FP8 caches (the bf16 ones are the model's, zeroed by the caller)."""
        for cache in self.caches or []:
            cache.zero_()

    def _plan(self, st, graph_rows=0, graph_absorbed=-1):
        # Host lists and the CPU block table as the engine's scheduler has them: no device sync.
        self.step.plan(st.q_lens, st.ctx_lens, st.block_table_host, sm_scale=self.cfg.sm_scale,
                       graph_rows=graph_rows, graph_absorbed_tokens=graph_absorbed)

    def _run_layer(self, l, rows):
        """Layer l on the first `rows` rows of the input buffers (>= the plan's new tokens)."""
        L = self.model.layers[l]
        out = self.out0 if l == 0 else self.out_rest
        cache = self.caches[l] if self.caches else L.cache
        self.step.run(L.q[:rows], L.kv_c[:rows], L.k_pe[:rows], L.w_kvb, cache, out=out[:rows], k_scale=self.k_scale)

    def plan(self, st):
        self._plan(st)

    def layer(self, l, st):
        self._run_layer(l, st.T)
        return (self.out0 if l == 0 else self.out_rest)[:st.T]


class _EmulatedGraph:
    def __init__(self, fn):
        self.replay = fn


class MlakitStepGraphPath(MlakitStepPath):
    """mlakit's MLA step, re-planned per step, all layers replayed from one CUDA graph per token bucket."""
    name = "mlakit_step_graph"

    # The bucket of a step is mlakit.graph_rows_bucket(its gathered rows, workspace rows,
    # caps.bucket_step), the rule mlakit-bench seed uses (gathered rows: context + new tokens, less
    # the context of the requests the step absorbs: MlaStep.gathered_rows). A step is planned with graph_rows = its
    # bucket, which sizes the host-sized launches (gather, up-projection GEMM) for that many rows;
    # the inputs are views of the first min(bucket, capacity) rows of the fixed input buffers (the
    # cache write's grid is sized by them). Graphs are captured lazily, the first time a bucket is seen: in
    # bench/compare_mla.py that is the warm-up pass, so the timed passes only plan and replay.

    def setup(self):
        super().setup()
        # On the CPU (the harness's self-test) a "graph" is the recorded layer loop re-run as
        # captured (same rows, same buffers) after re-planning: it checks the bucket rule, the
        # graph_rows plans and the row views on mlakit's CPU backend, not CUDA graph capture.
        self.emulated = self.dev.type != "cuda"
        self.graphs = {}        # bucket -> torch.cuda.CUDAGraph (or _EmulatedGraph)
        self.graph_bytes = 0    # device memory the captures took (free memory before - after)
        self.capture_s = 0.0
        self.host_split = []    # per run_step: (plan us, replay us)

    def bucket(self, st):
        """(graph_rows, graph_absorbed_tokens) of the step: its gathered rows bucketed as above,
        its absorbed tokens rounded up to a multiple of 64 (0 when it absorbs none: its graph
        holds no absorbed launches)."""
        absorbed, rows = self.step.graph_shape(st.q_lens, st.ctx_lens)
        return (_mlakit().graph_rows_bucket(rows, self.rows_cap, self.caps.bucket_step),
                min(-(-absorbed // 64) * 64, self.absorb_cap))

    def plan(self, st):
        self._plan(st, *self.bucket(st))

    def layer(self, l, st):
        raise RuntimeError("mlakit_step_graph runs whole steps")

    def run_step(self, st):
        key = self.bucket(st)
        t0 = time.perf_counter()
        self._plan(st, *key)  # the plan every replay reads (published to the device workspace)
        t1 = time.perf_counter()
        g = self.graphs.get(key)
        if g is None:
            g = self.graphs[key] = self._capture(key[0])
        t2 = time.perf_counter()
        g.replay()
        # Host time of the two calls (compare_mla reports their medians): plan() from Python, and
        # the graph launch, during which the GPU has not started the step's first kernel.
        self.host_split.append(((t1 - t0) * 1e6, (time.perf_counter() - t2) * 1e6))
        return self.out0[:st.T]

    def describe(self):
        return super().describe() + (" [CPU: graph replay emulated]" if self.emulated else "")

    def _capture(self, g_rows):
        rows = min(g_rows, self.caps.max_tokens)
        if self.emulated:
            return _EmulatedGraph(lambda: [self._run_layer(l, rows) for l in range(self.cfg.layers)])
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        free0 = torch.cuda.mem_get_info()[0]
        # One eager pass under the current plan first (cuBLAS handle and workspace, kernel
        # attributes), on a side stream as PyTorch asks before a capture. It rewrites the step's
        # own latents into the cache: harmless.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for l in range(self.cfg.layers):
                self._run_layer(l, rows)
        torch.cuda.current_stream().wait_stream(side)
        g = self._record(rows)
        torch.cuda.synchronize()
        self.graph_bytes += max(0, free0 - torch.cuda.mem_get_info()[0])
        self.capture_s += time.perf_counter() - t0
        return g

    def _record(self, rows):
        """The layer loop over `rows` rows captured into a graph (here PyTorch's)."""
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for l in range(self.cfg.layers):
                self._run_layer(l, rows)
        return g


# ------------------------------------------------------------------------------------------------

class MlakitStepGraphUploadInRunPath(MlakitStepGraphPath):
    """mlakit's MLA step graph-replayed, the plan uploaded by the graph's first node (upload_in_run)."""
    name = "mlakit_step_graph_uir"
    upload_in_run = True  # plan() only writes host memory; per step: plan() + one graph launch


class MlakitStepNativeGraphPath(MlakitStepGraphUploadInRunPath):
    """mlakit's MLA step, its layers in an mlakit.StreamGraph per bucket, planned and launched in one call."""
    name = "mlakit_step_graph_native"
    one_call = True  # host_split holds (plan + launch, 0): one native call per step

    # upload_in_run as the path above; the graph is mlakit's own (include/mlakit/graph.h), and
    # step.plan(..., replay=graph) plans and launches it in one native call: the host's work per
    # step is one Python -> C++ crossing instead of plan() plus torch's CUDAGraph.replay().

    def run_step(self, st):
        key = self.bucket(st)
        g = self.graphs.get(key)
        if g is None:
            self._plan(st, *key)
            g = self.graphs[key] = self._capture(key[0])
        t0 = time.perf_counter()
        if self.emulated:
            self._plan(st, *key)
            g.replay()
        else:
            self.step.plan(st.q_lens, st.ctx_lens, st.block_table_host, sm_scale=self.cfg.sm_scale,
                           graph_rows=key[0], graph_absorbed_tokens=key[1], replay=g)
        self.host_split.append(((time.perf_counter() - t0) * 1e6, 0.0))  # plan + launch, one call
        return self.out0[:st.T]

    def _record(self, rows):
        g = _mlakit().StreamGraph(self.dev)
        with g.capture():
            for l in range(self.cfg.layers):
                self._run_layer(l, rows)
        return g


class GraphedPath(Path):
    """inner's layer loop captured into one CUDA graph per inner.graph_key(st), replayed after
    inner.plan(st). Capture happens the first time a key is seen (the warm-up pass); the
    timed passes only plan and replay."""

    def __init__(self, inner: Path):
        super().__init__(inner.cfg, inner.model, inner.caps)
        self.inner = inner
        self.name = inner.name + "_graph"
        self.graphs = {}
        self.graph_bytes = 0  # device memory the captures took (intermediates in the graphs' pools)

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
        torch.cuda.synchronize()
        free0 = torch.cuda.mem_get_info()[0]
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
        torch.cuda.synchronize()
        self.graph_bytes += max(0, free0 - torch.cuda.mem_get_info()[0])
        return g, out0


PATH_NAMES = ["fa2_vllm", "flashinfer_fa3", "flashinfer_fa3_host", "flashinfer_fa2", "mlakit_step", "mlakit_step_graph",
              "mlakit_step_graph_uir", "mlakit_step_graph_native", "mlakit_kernel_in_vllm_path",
              "mlakit_kernel_in_vllm_path_graph"]
# What bench/compare_mla.py runs unless --paths says otherwise: the engines' paths and mlakit's step.
DEFAULT_PATHS = ["fa2_vllm", "flashinfer_fa3", "flashinfer_fa3_host", "flashinfer_fa2", "mlakit_step", "mlakit_step_graph",
                 "mlakit_step_graph_uir", "mlakit_step_graph_native"]


def with_absorb(names, limits):
    """names with every mlakit step path once per absorb_max_query_len of `limits`
    ("<path>/a<N>"), each right after the other; other paths as they are."""
    out = []
    for n in names:
        out += [f"{n}/a{a}" for a in limits] if n.startswith("mlakit_step") else [n]
    return out


def with_kv_cache_dtypes(names, kinds):
    """names with every mlakit step path once per cache format of `kinds` ("auto": as it is,
    else "<path>@<kind>"), each right after the other; other paths as they are."""
    out = []
    for n in names:
        if n.startswith("mlakit_step"):
            out += [n if k == "auto" else f"{n}@{k}" for k in kinds]
        else:
            out.append(n)
    return out


def is_path_name(name):
    name, _, absorb = name.partition("/a")
    if absorb and not (absorb.lstrip("-").isdigit() and name.startswith("mlakit_step")):
        return False
    base, _, kind = name.partition("@")
    return base in PATH_NAMES and (not kind or (kind in M.KV_CACHE_DTYPES and base.startswith("mlakit_step")))


def make_path(name, cfg, model, caps):
    if "/a" in name:
        if not is_path_name(name):
            raise ValueError(f"unknown path {name!r}: '/a<N>' (absorb_max_query_len) follows an mlakit_step path only")
        head, _, absorb = name.partition("/a")
        p = make_path(head, cfg, model, caps)
        p.absorb, p.name = int(absorb), name
        return p
    base, _, kind = name.partition("@")
    if kind:
        if not is_path_name(name):
            raise ValueError(f"unknown path {name!r}: a cache format ({', '.join(M.KV_CACHE_DTYPES)}) "
                             "follows '@' after an mlakit_step path only")
        p = make_path(base, cfg, model, caps)
        p.kv_cache_dtype, p.name = kind, name
        return p
    if name == "fa2_vllm":
        return FA2Path(cfg, model, caps)
    if name in ("flashinfer_fa3", "flashinfer_fa2", "flashinfer_fa3_host"):
        backend = name.split("_")[1]
        return FlashInferPath(cfg, model, caps, backend=backend,
                              indptr="host" if name.endswith("_host") else "device")
    if name == "mlakit_step":
        return MlakitStepPath(cfg, model, caps)
    if name == "mlakit_step_graph":
        return MlakitStepGraphPath(cfg, model, caps)
    if name == "mlakit_step_graph_uir":
        return MlakitStepGraphUploadInRunPath(cfg, model, caps)
    if name == "mlakit_step_graph_native":
        return MlakitStepNativeGraphPath(cfg, model, caps)
    if name == "mlakit_kernel_in_vllm_path":
        return MlakitKernelInVllmPath(cfg, model, caps)
    if name == "mlakit_kernel_in_vllm_path_graph":
        return GraphedPath(MlakitKernelInVllmPath(cfg, model, caps))
    raise ValueError(f"unknown path {name!r}; known: {', '.join(PATH_NAMES)}")
