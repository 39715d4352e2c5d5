"""The MLA prefill step (DeepSeek-V2/V3 multi-head latent attention) as one object per engine.

Per engine step, :meth:`MlaStep.plan` takes the step's host metadata (new tokens and cached
context per request, the block table); per layer, :meth:`MlaStep.run` writes the new latents into
the paged cache, up-projects the latents of every position the step attends (context and new)
with ``kv_b_proj``, and runs attention with K split into the per-head "nope" part and the shared
RoPE key, returning ``out [T, H, v_head_dim]``. See ``include/mlakit/mla.h`` and ``docs/mla.md``.

    scale = mlakit.deepseek_softmax_scale(model.config)      # YaRN checkpoints need it
    step = mlakit.MlaStep(num_heads=16, dtype=torch.bfloat16, device="cuda", block_size=16,
                          num_blocks=kv_cache.shape[0], max_batch=256, max_tokens=8192,
                          max_context_tokens=8192)
    step.plan(query_lens, context_lens, block_table, sm_scale=scale)   # host arrays, once per step
    for layer in layers:                                       # graph-capturable
        out = step.run(q[layer], kv_c[layer], k_pe[layer], kv_b_proj[layer], kv_cache[layer])

What the step expects from the model (as Hugging Face's DeepSeek-V2/V3 attention computes it):

* ``kv_c`` is the latent **after** ``kv_a_layernorm`` (the RMSNorm of the first ``kv_lora_rank``
  columns of ``kv_a_proj_with_mqa``'s output); ``k_pe`` is the last ``qk_rope_head_dim`` columns
  with RoPE applied. The cache holds both, so the norm is applied once, before the step.
* ``q``'s last ``qk_rope_head_dim`` columns and ``k_pe`` (the new ones and those already in the
  cache) must carry RoPE in the same pair layout: interleaved pairs ``(2i, 2i+1)`` (DeepSeek's own
  code; Hugging Face's ``rope_interleave=True``) or rotate-half ``(i, i + d/2)``. The step only
  takes dot products of the two, so either works when q and every cached key share it.
* DeepSeek's YaRN checkpoints (``rope_scaling`` with ``mscale_all_dim``: V2, V2-Lite, V3) scale
  the logits by ``qk_head_dim**-0.5 * mscale**2``, not the default ``qk_head_dim**-0.5`` (which
  gives 24-30% error on V2-Lite / V3): pass ``sm_scale=mlakit.deepseek_softmax_scale(config)``.
* K and V are rounded to the step's dtype (bf16/fp16) after the up-projection, as an engine that
  materializes them does; against float64 K/V the LSE moves by up to ~2.5e-3 in bf16 (~5e-4 in
  fp16) and the output by the dtype's rounding.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from typing import Any, Optional

from . import (_C, _device_name, _dtype_name, _empty, _handles, _launch_stream, _native, _registry, _shape,
               _stream_handle)

__all__ = ["MlaStep", "MlaPlanInfo"]

MlaPlanInfo = _C.MlaPlanInfo
_pkg = sys.modules[__package__]  # its _TorchTensor: torch.Tensor once registered with the extension


def _flat_block_table(block_table: Any):
    """(host int array, cols) of a [batch, cols] block table given as a 2-D NumPy array or CPU torch
    tensor (passed on as it is, any strides) or a list of equal-length rows (flattened); cols 0:
    the extension takes it from the array's shape."""
    kind = type(block_table)
    if kind is _pkg._TorchTensor or (_pkg._TorchTensor is None and kind.__module__.startswith("torch")
                                     and _pkg._register_torch() is kind):
        # A torch tensor, the block table as engines hold it: the extension reads it itself
        # (PyTorch's exchange table: shape, strides, int32 or int64, in one C call) and names
        # what it cannot take. Each Python attribute read of a torch tensor costs about as much.
        # (The first torch tensor mlakit meets registers torch with the extension.)
        return block_table, 0
    shape = getattr(block_table, "shape", None)
    if shape is not None:
        if type(block_table).__module__.startswith("torch") and not block_table.is_cuda:
            # Any other CPU tensor (int64, a subclass, torch without the exchange table) as a NumPy
            # view (~0.7 us): the extension imports NumPy arrays several microseconds faster than
            # torch's DLPack capsules.
            try:
                block_table = block_table.numpy()
            except (TypeError, RuntimeError):  # a dtype NumPy lacks: let the extension name it
                pass
        if len(shape) != 2:
            raise ValueError(f"mlakit: block_table: must be 2-D [batch_size, cols], got shape {list(shape)}")
        # The extension reads a 2-D host array through its strides: no copy or reshape here (a
        # torch reshape from Python costs more than the planning it feeds).
        return block_table, int(shape[1])
    rows = [list(r) for r in block_table]
    cols = len(rows[0]) if rows else 1
    if any(len(r) != cols for r in rows):
        raise ValueError("mlakit: block_table: rows must have equal lengths (pad them)")
    return list(itertools.chain.from_iterable(rows)), cols


def _clear_past_the_step(fresh: list, total_q: int, rows: int, q: Any, stream: Any) -> None:
    """Rows [total_q, rows) of outputs run() allocated set to a key-less row's values (out 0, lse
    -inf), so no uninitialized memory is returned; the launch writes the rows before them.

    Eager, only the rows past the step are written: disjoint from what the launch writes, so
    no ordering between the two is needed. Inside a CUDA graph capture the plan of a replay is
    not known, so the whole tensors are cleared before the captured launch (same stream)."""
    if type(q).__module__.startswith("torch") and q.is_cuda:
        torch = sys.modules["torch"]
        # On the launch stream: an explicit one (a raw handle, a torch or CuPy stream), else
        # PyTorch's current stream, which the launch takes too.
        ctx = (torch.cuda.stream(torch.cuda.ExternalStream(_stream_handle(stream, like=q), device=q.device))
               if stream is not None else contextlib.nullcontext())
        with ctx:
            start = 0 if torch.cuda.is_current_stream_capturing() else total_q
            for x, value in fresh:
                if start < rows:
                    x[start:].fill_(value)
        return
    if total_q < rows:
        for x, value in fresh:
            x[total_q:] = value


def _kv_cache_dtype_name(x: Any) -> str:
    """vLLM's kv_cache_dtype names; torch.float8_e4m3fn / torch.uint8 as "fp8"."""
    if isinstance(x, str):
        return x.lower()
    name = str(x)
    return "fp8" if name in ("torch.float8_e4m3fn", "torch.uint8") else name


class MlaStep:
    """One engine step of MLA prefill attention, planned once and run per layer (inputs as the
    module docstring says: ``kv_c`` after ``kv_a_layernorm``, q and k RoPE in one pair layout,
    ``sm_scale`` from :func:`mlakit.deepseek_softmax_scale` for YaRN checkpoints; K/V pass
    through the step's dtype after the up-projection).

    Static config (fixed at construction): ``num_heads`` (16 for DeepSeek-Coder-V2-Lite, 128 for
    DeepSeek-V3), ``kv_lora_rank`` (512), ``qk_nope_head_dim`` (128), ``qk_rope_head_dim`` (64),
    ``v_head_dim`` (128), ``dtype`` (bf16/fp16), the paged cache's ``block_size`` and
    ``num_blocks``, and capacities: ``max_batch`` requests, ``max_tokens`` new tokens and
    ``max_context_tokens`` cached tokens per step. ``workspace_rows`` (default: ``max_tokens +
    max_context_tokens``) bounds the latent/K/V rows of one attention launch: a step whose
    context + new tokens fit runs one causal launch, otherwise the context runs in chunks of that
    many rows merged by LSE.

    ``upload_in_run=True``: ``plan()`` only writes host memory and the step's first ``run()``
    uploads the plan; a ``run()`` captured into a CUDA graph records that copy as the graph's first
    node, so a replay uploads the plan in force when it runs and the host's work per step is
    ``plan()`` plus the graph launch (see ``MlaConfig::upload_in_run`` in ``include/mlakit/mla.h``).
    ``run()`` then keeps upload state: call a step's ``plan()`` and ``run()`` from one thread, and
    replay its graphs on one stream.

    ``kv_cache_dtype`` (vLLM's names): ``"auto"`` (the cache in ``dtype``), ``"fp8"`` /
    ``"fp8_e4m3"`` (e4m3 ``[num_blocks, block_size, kv_lora_rank + qk_rope_head_dim]``, value =
    code x the layer's scale, passed to :meth:`run` as ``k_scale``: vLLM's ``layer._k_scale``) or
    ``"fp8_ds_mla"`` (DeepSeek-V3.2's 656-byte rows ``[num_blocks, block_size, 656]``: 512 e4m3
    codes, 4 float32 scales of 128 codes each, 64 bf16 RoPE values; bf16 steps with the DeepSeek
    dims). FP8 caches are ``torch.uint8`` (as vLLM allocates them) or ``torch.float8_e4m3fn``
    tensors. :meth:`run` writes the new tokens quantized as the format defines and attends them
    as the cache holds them (their dequantized values), so later steps and an engine's decode
    kernels read the latents this step attended (``docs/fp8.md``).

    ``fp8_attention=True``: attention runs on e4m3 q, K and V, with per-launch scales taken from
    what the step reads anyway (the latent rows' norms, the k_pe maximum, the weight's row norms;
    q per head by its maximum), and ``out`` stays in ``dtype``: about 4% relative error against
    the 16-bit step's float64 reference (``MlaConfig::fp8_attention``, ``docs/fp8.md``). The CPU
    backend runs it (slower than 16-bit attention there: the CPU has no FP8 products); CUDA
    refuses it.

    ``absorb_max_query_len``: a request with 1 to this many new tokens, and no more new tokens
    than context tokens, attends in latent space (q_nope absorbed through W_UK, the latent
    attention of :class:`mlakit.LatentAttention` over the cache, W_UV after it) instead of
    up-projecting its context: decode, speculative verification and short extends. ``-1`` (the
    default) takes the backend's measured crossover (``MlaConfig::absorb_max_query_len``,
    ``docs/mla.md``), ``0`` never absorbs. ``max_absorbed_tokens`` (0: ``min(max_tokens, 512)``)
    caps a step's absorbed tokens; later requests up-project. ``info.absorbed_requests`` tells
    what a plan chose; :meth:`graph_shape` gives what ``graph_absorbed_tokens`` and ``graph_rows``
    must cover.

    ``max_topk`` > 0 allows DeepSeek-V3.2 steps: ``plan(..., topk=K)`` sends every new token at a
    position ``>= K`` through its row of the layer's indexer output (``run(..., indices=)``,
    ``[T, K]`` int32 request-local positions, ``-1`` padded; ``topk_length`` optional) in latent
    space, and the tokens below ``K`` (which see at most ``K`` keys, all of which top-K selects)
    through the dense step (``MlaPlanOptions::topk``, ``docs/mla.md``). ``max_decoded_rows`` (FP8
    caches on CUDA): rows of a bf16 workspace into which those tokens' latent attention decodes
    the cache rows of a step that reads each many times (V3.2 prefill chunks) once
    (:class:`mlakit.LatentAttention`'s).
    """

    def __init__(self, num_heads: int = 16, kv_lora_rank: int = 512, qk_nope_head_dim: int = 128,
                 qk_rope_head_dim: int = 64, v_head_dim: int = 128, *, dtype: Any = "bf16",
                 device: Any = "cpu", block_size: int = 16, num_blocks: int, max_batch: int,
                 max_tokens: int, max_context_tokens: int = 0, workspace_rows: int = 0,
                 upload_in_run: bool = False, fp8_attention: bool = False,
                 kv_cache_dtype: Any = "auto", absorb_max_query_len: int = -1,
                 max_absorbed_tokens: int = 0, max_topk: int = 0, max_decoded_rows: int = 0) -> None:
        device_name = _device_name(device)
        if device_name == "cuda":
            device_name = "cuda:0"
        self._impl = _C.MlaStep(int(num_heads), int(kv_lora_rank), int(qk_nope_head_dim),
                                int(qk_rope_head_dim), int(v_head_dim), _dtype_name(dtype),
                                int(block_size), int(num_blocks), int(max_batch), int(max_tokens),
                                int(max_context_tokens), int(workspace_rows), device_name,
                                bool(upload_in_run), bool(fp8_attention), _kv_cache_dtype_name(kv_cache_dtype),
                                int(absorb_max_query_len), int(max_absorbed_tokens), int(max_topk),
                                int(max_decoded_rows))
        self._device = device_name
        self.handle: int = next(_handles)
        _registry[self.handle] = self

    num_heads = property(lambda self: self._impl.num_heads)
    kv_lora_rank = property(lambda self: self._impl.kv_lora_rank)
    qk_nope_head_dim = property(lambda self: self._impl.qk_nope_head_dim)
    qk_rope_head_dim = property(lambda self: self._impl.qk_rope_head_dim)
    v_head_dim = property(lambda self: self._impl.v_head_dim)
    block_size = property(lambda self: self._impl.block_size)
    num_blocks = property(lambda self: self._impl.num_blocks)
    dtype = property(lambda self: self._impl.dtype)
    device = property(lambda self: self._impl.device)
    fp8_attention = property(lambda self: self._impl.fp8_attention)
    kv_cache_dtype = property(lambda self: self._impl.kv_cache_dtype, doc='"auto", "fp8" or "fp8_ds_mla"')
    absorb_max_query_len = property(lambda self: self._impl.absorb_max_query_len,
                                    doc="the absorbed requests' limit in force (-1 resolved; 0: none)")

    def graph_shape(self, query_lens: Any, context_lens: Any, topk: int = 0) -> tuple:
        """``(absorbed_tokens, gathered_rows)`` of a step of these lengths: the new tokens it
        absorbs, and the rows its first gather covers (every new token, and the context of each
        request that up-projects) when at least that many are absorbed. What a graph-replayed
        plan's ``graph_absorbed_tokens`` and ``graph_rows`` must reach: bucket them (e.g. the
        rows with :func:`mlakit.graph_rows_bucket`) and capture one graph per pair."""
        a, rows = self._impl.graph_shape(query_lens, context_lens, int(topk))
        return int(a), int(rows)

    @property
    def planned(self) -> bool:
        return self._impl.planned

    @property
    def info(self) -> MlaPlanInfo:
        return self._impl.info()

    def plan(self, query_lens: Any, context_lens: Any, block_table: Any, *,
             slot_mapping: Any = None, sm_scale: Optional[float] = None, graph_rows: int = 0,
             graph_absorbed_tokens: int = -1, topk: int = 0, stream: Any = None, replay: Any = None) -> None:
        """Plans one engine step on the host (no device sync).

        ``query_lens`` / ``context_lens``: per request, new tokens this step and tokens already in
        the cache; ``block_table``: ``[batch_size, cols]`` cache block of every ``block_size``
        positions of each request; ``slot_mapping`` (optional, ``[total new tokens]``): where the
        new tokens go instead of their block-table slots. All host arrays (lists, NumPy, CPU
        tensors). ``sm_scale`` None = ``1/sqrt(qk_nope_head_dim + qk_rope_head_dim)``; DeepSeek's
        YaRN checkpoints (V2, V2-Lite, V3) need ``mlakit.deepseek_softmax_scale(config)`` instead
        (``qk_head_dim**-0.5 * mscale**2``; the default is 24-30% off on their outputs).

        ``graph_rows`` > 0 sizes run()'s gather/up-projection launches for that many rows, so a CUDA
        graph captured under one plan replays correctly after any later plan with the same
        ``graph_rows`` (its context + new tokens must fit, and its new tokens the captured
        tensors' rows). ``graph_absorbed_tokens`` (with ``graph_rows``): the rows the absorbed
        requests' launches cover and the most new tokens the step absorbs (``-1``:
        ``max_absorbed_tokens``; ``0``: none, no such launches). A rejected plan leaves the previous
        one in force.

        ``replay``: a :class:`mlakit.StreamGraph` of this step's layers, launched on ``stream``
        right after planning, in the same native call (a rejected plan launches nothing; a graph
        never captured is refused after the plan has been made).
        """
        flat, cols = _flat_block_table(block_table)
        scale = 0.0 if sm_scale is None else float(sm_scale)
        s = _stream_handle(stream, device=self._device)
        self._impl.plan(query_lens, context_lens, flat, cols, slot_mapping, scale, int(graph_rows), s,
                        None if replay is None else replay._impl, int(graph_absorbed_tokens), int(topk))

    def run(self, q: Any, kv_c: Any, k_pe: Any, kv_b_proj: Any, kv_cache: Any, out: Any = None,
            lse: Any = None, *, k_scale: Any = None, indices: Any = None, topk_length: Any = None,
            return_lse: bool = False, stream: Any = None) -> Any:
        """One layer: writes the new tokens' ``[kv_c, k_pe]`` into ``kv_cache`` (mutated), then
        attention of ``q [T, H, nope + rope]`` (RoPE applied to the last ``rope`` columns) over
        each request's context and new tokens.

        ``kv_c [T, kv_lora_rank]`` (the latent after ``kv_a_layernorm``), ``k_pe [T, rope]`` (RoPE
        applied, in q's pair layout), ``kv_b_proj [H * (nope + v), kv_lora_rank]`` (checkpoint
        layout), ``kv_cache [num_blocks, block_size, kv_lora_rank + rope]``. K/V are up-projected
        into the step's dtype (bf16/fp16) before attention. Every tensor's last dimension must be
        contiguous, except ``lse``'s: it takes any non-overlapping strides, as
        :meth:`RaggedPrefill.run` does (``[T, H]``, or an ``[H, T]`` array's ``.T``).

        FP8 caches (``kv_cache_dtype``): ``kv_cache`` uint8 or float8_e4m3fn, its rows in the
        format (656 bytes for ``"fp8_ds_mla"``); ``k_scale`` (``"fp8"`` only, required there):
        the layer's float32 scale, one element (``[]`` or ``[1]``), on the step's device, read
        when the step runs (a captured graph replays with the value the tensor holds then).

        Sparse plans (``plan(..., topk=K)``): ``indices [T, K]`` int32 (the layer's indexer output,
        request-local positions, ``-1`` padded) and optionally ``topk_length [T]`` int32, on the
        step's device.

        ``T`` may exceed the plan's new tokens (a token bucket): rows past them are ignored. An
        ``out`` / ``lse`` passed in keeps its rows past them as they were (nothing is written
        there). One this call allocates has ``T`` rows, like ``q``, and its rows past the new
        tokens hold what a row with no key gets: ``out`` 0 and ``lse`` ``-inf`` (written on the
        launch stream; inside a ``torch.cuda.graph`` capture the whole tensor is cleared first, so
        a replay returns them whatever its plan). Returns ``out [T, H, v_head_dim]`` (and
        ``lse [T, H]`` float32 when ``return_lse``); only launches, on the caller's current stream.
        """
        if out is None or (return_lse and lse is None):
            t = _shape(q, "q", 3)[0]
            fresh = []  # the outputs allocated here, with what their rows past the step hold
            if out is None:
                out = _empty(q, (t, self.num_heads, self.v_head_dim))
                fresh.append((out, 0.0))
            if return_lse and lse is None:
                lse = _empty(q, (t, self.num_heads), "float32")
                fresh.append((lse, float("-inf")))
            if fresh:
                _clear_past_the_step(fresh, self._impl.info().total_q, t, q, stream)
        self._impl.run(_native(q), _native(kv_c), _native(k_pe), _native(kv_b_proj), _native(kv_cache),
                       _native(out), _native(lse), _launch_stream(stream, q), _native(k_scale), _native(indices),
                       _native(topk_length))
        return (out, lse) if return_lse else out

    def __repr__(self) -> str:
        return (f"mlakit.MlaStep(num_heads={self.num_heads}, kv_lora_rank={self.kv_lora_rank}, "
                f"dtype={self.dtype!r}, device={self.device!r}, block_size={self.block_size}, "
                f"num_blocks={self.num_blocks}"
                + (f", kv_cache_dtype={self.kv_cache_dtype!r})" if self.kv_cache_dtype != "auto" else ")"))
