"""Latent-space ("absorbed") MLA attention, dense and sparse (DeepSeek-V3.2's DSA), over the paged
latent cache that :class:`mlakit.MlaStep` writes. See ``include/mlakit/latent.h`` and
``docs/latent-attention.md``.

    attn = mlakit.LatentAttention(num_heads=16, dtype=torch.bfloat16, device="cpu", block_size=64,
                                  num_blocks=kv_cache.shape[0], max_batch=128, max_q_tokens=512,
                                  max_kv_tokens=1 << 20)
    attn.plan(query_lens, kv_lens, block_table, sm_scale=mlakit.deepseek_softmax_scale(cfg))
    for layer in layers:
        out = attn.run(q[layer], kv_cache[layer])            # q [T, H, 576] -> out [T, H, 512]

``kv_lens`` count each request's cached tokens **including its new ones** (the engine has written
their latents into the cache first), as FlashMLA's ``cache_seqlens``; dense new tokens are causal
among themselves (bottom-right aligned). Sparse: ``plan(..., topk=K)``, then
``run(..., indices=[T, K] int32)`` (request-local positions by default, ``indices="slots"`` at plan
for FlashMLA's global cache slots), ``-1`` = none, optional ``topk_length [T]``. A row that sees no
key gets ``out`` 0 and ``lse`` -inf (FlashMLA writes +inf there).
"""

from __future__ import annotations

from typing import Any, Optional

from . import (_C, _check_lse_layout, _device_name, _dtype_name, _empty, _handles, _launch_stream, _native,
               _registry, _shape, _stream_handle)
from .mla import _clear_past_the_step, _flat_block_table

__all__ = ["LatentAttention", "LatentPlanInfo"]

LatentPlanInfo = _C.LatentPlanInfo


class LatentAttention:
    """Latent-space MLA attention: every query head attends over the same cached latent rows
    (``kv_lora_rank + qk_rope_head_dim`` wide: 512 + 64), V being their first ``kv_lora_rank``
    columns; ``out [T, H, kv_lora_rank]`` is what the engine up-projects with ``W_UV``.

    Static config (fixed at construction): ``num_heads`` (1 to 128), ``kv_lora_rank`` (512),
    ``qk_rope_head_dim`` (64), ``dtype`` (bf16 / fp16), the paged cache's ``block_size`` (a power
    of two up to 256) and ``num_blocks``, ``kv_cache_dtype`` (``"auto"``: the 16-bit cache;
    ``"fp8_ds_mla"``: DeepSeek-V3.2's 656-byte rows, a uint8 or float8_e4m3fn ``[num_blocks,
    block_size, 656]`` cache, with (512, 64); ``"fp8"``: vLLM's, one e4m3 code a value and the
    layer's scale passed to ``run``; both with bf16), and capacities: ``max_batch`` requests,
    ``max_q_tokens`` new tokens, ``max_kv_tokens`` cached tokens (sum of ``kv_lens``) and
    ``max_topk`` (0: dense plans only). ``kv_split_size`` (0: the backend's, 1024 keys on the CPU,
    512 on CUDA): keys per split of a short request's range, merged by LSE. ``upload_in_run``: as
    :class:`mlakit.MlaStep`'s. ``max_decoded_rows`` (FP8 caches on CUDA; 0: none): rows of a bf16
    workspace (1,152 bytes each) into which a run decodes the cached rows of a plan whose items
    read each row many times (extends, DSA prefill) once, then attends them with the 16-bit
    kernel; plans that do not fit it, and decode, decode the rows in the kernel (``plan``'s
    ``fp8_decode``).

    Backends: the CPU, any ``kv_lora_rank`` (a multiple of 32 up to 512) and ``qk_rope_head_dim``
    (a multiple of 32 up to 128), with AVX-512 BF16 products where present, fp32 elsewhere and for
    fp16; and CUDA on Hopper GPUs (compute capability 9.0, builds with the ``90a`` kernels):
    ``kv_lora_rank`` 512 with ``qk_rope_head_dim`` 64, bf16 or fp16, any page size, dense and
    sparse. On CUDA, other widths raise ``ValueError`` naming ``config.kv_lora_rank``, and so do
    other GPUs and builds without the kernel (naming ``config.device``). Results are bitwise
    repeatable and do not depend on the batch around a request.
    """

    def __init__(self, num_heads: int = 16, kv_lora_rank: int = 512, qk_rope_head_dim: int = 64, *,
                 dtype: Any = "bf16", device: Any = "cpu", block_size: int = 64, num_blocks: int,
                 max_batch: int, max_q_tokens: int, max_kv_tokens: int = 0, max_topk: int = 0,
                 kv_split_size: int = 0, kv_cache_dtype: str = "auto", upload_in_run: bool = False,
                 max_decoded_rows: int = 0) -> None:
        device_name = _device_name(device)
        if device_name == "cuda":
            device_name = "cuda:0"
        self._impl = _C.LatentAttention(int(num_heads), int(kv_lora_rank), int(qk_rope_head_dim), _dtype_name(dtype),
                                        str(kv_cache_dtype), int(block_size), int(num_blocks), int(max_batch),
                                        int(max_q_tokens), int(max_kv_tokens), int(max_topk), int(kv_split_size),
                                        device_name, bool(upload_in_run), int(max_decoded_rows))
        self._device = device_name
        self.handle: int = next(_handles)
        _registry[self.handle] = self

    num_heads = property(lambda self: self._impl.num_heads)
    kv_lora_rank = property(lambda self: self._impl.kv_lora_rank)
    qk_rope_head_dim = property(lambda self: self._impl.qk_rope_head_dim)
    block_size = property(lambda self: self._impl.block_size)
    num_blocks = property(lambda self: self._impl.num_blocks)
    max_batch = property(lambda self: self._impl.max_batch)
    max_q_tokens = property(lambda self: self._impl.max_q_tokens)
    max_kv_tokens = property(lambda self: self._impl.max_kv_tokens)
    max_topk = property(lambda self: self._impl.max_topk)
    max_decoded_rows = property(lambda self: self._impl.max_decoded_rows)
    dtype = property(lambda self: self._impl.dtype)
    device = property(lambda self: self._impl.device)
    causal = property(lambda self: self._impl.causal, doc="the current plan's causal flag (dense plans)")
    sm_scale = property(lambda self: self._impl.sm_scale, doc="the current plan's scale (0.0 = the default)")
    topk = property(lambda self: self._impl.topk, doc="the current plan's topk (0 = dense)")

    @property
    def planned(self) -> bool:
        return self._impl.planned

    @property
    def info(self) -> LatentPlanInfo:
        return self._impl.info()

    def plan(self, query_lens: Any, kv_lens: Any = None, block_table: Any = None, *, causal: bool = True,
             sm_scale: Optional[float] = None, topk: int = 0, indices: str = "positions",
             batch_invariant: bool = False, fp8_decode: str = "auto", stream: Any = None) -> None:
        """Plans on the host (no device sync); a rejected plan leaves the previous one in force.

        ``query_lens``: new tokens per request (their q rows consecutive, in request order);
        ``kv_lens``: tokens in the cache per request, the new ones included; ``block_table``:
        ``[batch_size, cols]`` cache block of every ``block_size`` positions of each request. Host
        arrays: lists, NumPy, CPU tensors (int32 or int64; a 2-D table is read through its strides).
        ``block_table`` may instead be the engine's own table on the object's GPU (an int32 CUDA
        array with contiguous rows): plan() then neither reads nor copies it and :meth:`run`
        reads it, so it must hold the step's values whenever a run (or a graph replaying one)
        executes, and its entries are not checked (as in FlashMLA and FlashInfer).

        ``sm_scale`` None = ``1/sqrt(kv_lora_rank + qk_rope_head_dim)`` (FlashMLA's default);
        DeepSeek checkpoints need their non-absorbed scale, ``qk_head_dim**-0.5`` times YaRN's
        ``mscale**2``: :func:`mlakit.deepseek_softmax_scale`. ``causal`` (dense): new token ``i``
        of a request sees positions ``<= kv_len - query_len + i``.

        ``topk`` > 0 plans sparse attention: :meth:`run` then takes ``indices [T, topk]`` int32,
        naming keys by request-local position (``indices="positions"``, what the indexer
        produces) or global cache slot (``"slots"``, FlashMLA's convention: ``block * block_size
        + offset``; ``kv_lens`` and ``block_table`` are then not needed).

        ``batch_invariant=True`` splits every request's keys by ``kv_split_size`` alone, so a
        request's result has the same bits alone or in any batch; by default a batch that fills
        the GPU on its own splits long requests less (faster decode; the last bits may then depend
        on the batch, and the same plan still gives the same bits every run).

        ``fp8_decode`` (FP8 caches on CUDA with ``max_decoded_rows``): ``"auto"`` decodes the
        plan's rows once into the workspace when its items read each row at least 3 times on
        average and they fit (``info.decoded_rows`` says), ``"once"`` whenever they fit,
        ``"in_kernel"`` never. Positions plans only (``indices="slots"`` decode in the kernel).
        """
        if sm_scale is None:
            scale = 0.0
        else:
            scale = float(sm_scale)
            if not scale > 0.0:
                raise ValueError(f"mlakit: sm_scale: must be a positive finite number or None, got {sm_scale}")
        flat, cols = (None, 0) if block_table is None else _flat_block_table(block_table)
        s = _stream_handle(stream, device=self._device)
        self._impl.plan(query_lens, kv_lens, flat, cols, scale, bool(causal), int(topk), str(indices),
                        bool(batch_invariant), str(fp8_decode), s)

    def run(self, q: Any, kv_cache: Any, *, q_pe: Any = None, indices: Any = None, topk_length: Any = None,
            attn_sink: Any = None, k_scale: Any = None, out: Any = None, lse: Any = None, max_logits: Any = None,
            return_lse: bool = False, return_max_logits: bool = False, lse_layout: str = "th",
            stream: Any = None) -> Any:
        """One layer of the current plan; only launches.

        ``q [T, H, kv_lora_rank + qk_rope_head_dim]`` (the absorbed ``q_nope`` then ``q_pe``), or
        ``q`` = ``q_nope [T, H, kv_lora_rank]`` with ``q_pe [T, H, qk_rope_head_dim]``;
        ``kv_cache [num_blocks, block_size, kv_lora_rank + qk_rope_head_dim]``. Sparse plans:
        ``indices [T, topk]`` int32 (-1 = none; entries outside the bound are skipped),
        ``topk_length [T]`` int32 (optional: only the first ``topk_length[t]`` entries of row t).
        ``attn_sink [H]`` float32 (optional, FlashMLA's): ``out *= exp(lse) / (exp(lse) +
        exp(sink))``, lse unchanged. FP8 caches: ``kv_cache`` uint8 or float8_e4m3fn,
        ``[num_blocks, block_size, 656]`` (``"fp8_ds_mla"``) or ``[..., kv_lora_rank +
        qk_rope_head_dim]`` (``"fp8"``, which needs ``k_scale``: the layer's float32 scale, one
        element on the device, read when the run executes).

        Returns ``out [T, H, kv_lora_rank]``, or a tuple with ``lse`` and/or ``max_logits``
        (``[T, H]`` float32, natural log / the largest scaled logit; ``[H, T]`` with
        ``lse_layout="ht"``) after it, as asked by ``return_lse`` / ``return_max_logits`` (or given).
        ``T`` may exceed the plan's tokens: rows past them are not read into a result; outputs
        passed in keep theirs, outputs allocated here hold a key-less row's values there (0, -inf).
        """
        if lse_layout != "th":
            _check_lse_layout(lse_layout)
        ht = lse_layout == "ht"
        want_lse = return_lse or lse is not None
        want_max = return_max_logits or max_logits is not None
        if out is None or (want_lse and lse is None) or (want_max and max_logits is None):
            t, h, _ = _shape(q, "q", 3)
            fresh = []
            if out is None:
                out = _empty(q, (t, h, self.kv_lora_rank))
                fresh.append((out, 0.0))
            # lse and max_logits in [H, T] memory are cleared through their [T, H] views.
            if want_lse and lse is None:
                lse = _empty(q, (h, t) if ht else (t, h), "float32")
                fresh.append((lse.T if ht else lse, float("-inf")))
            if want_max and max_logits is None:
                max_logits = _empty(q, (h, t) if ht else (t, h), "float32")
                fresh.append((max_logits.T if ht else max_logits, float("-inf")))
            if fresh:
                _clear_past_the_step(fresh, self._impl.info().total_q, t, q, stream)
        self._impl.run(_native(q), None if q_pe is None else _native(q_pe), _native(kv_cache),
                       None if indices is None else _native(indices),
                       None if topk_length is None else _native(topk_length),
                       None if attn_sink is None else _native(attn_sink),
                       None if k_scale is None else _native(k_scale), _native(out),
                       None if lse is None else _native(lse), None if max_logits is None else _native(max_logits),
                       ht, _launch_stream(stream, q))
        if want_lse and want_max:
            return out, lse, max_logits
        if want_lse:
            return out, lse
        if want_max:
            return out, max_logits
        return out

    @staticmethod
    def workspace_sizes(num_heads: int = 16, kv_lora_rank: int = 512, qk_rope_head_dim: int = 64, *,
                        dtype: Any = "bf16", device: Any = "cpu", block_size: int = 64, num_blocks: int,
                        max_batch: int, max_q_tokens: int, max_kv_tokens: int = 0, max_topk: int = 0,
                        kv_split_size: int = 0, kv_cache_dtype: str = "auto", max_decoded_rows: int = 0) -> tuple:
        """(host bytes, device bytes) an object of this config allocates."""
        return _C.LatentAttention.workspace_sizes(int(num_heads), int(kv_lora_rank), int(qk_rope_head_dim),
                                                  _dtype_name(dtype), str(kv_cache_dtype), int(block_size),
                                                  int(num_blocks), int(max_batch), int(max_q_tokens),
                                                  int(max_kv_tokens), int(max_topk), int(kv_split_size),
                                                  _device_name(device), False, int(max_decoded_rows))

    def __repr__(self) -> str:
        return (f"mlakit.LatentAttention(num_heads={self.num_heads}, kv_lora_rank={self.kv_lora_rank}, "
                f"qk_rope_head_dim={self.qk_rope_head_dim}, dtype={self.dtype!r}, device={self.device!r}, "
                f"block_size={self.block_size}, num_blocks={self.num_blocks})")

