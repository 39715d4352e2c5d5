"""FlashMLA's Python interface (``flash_mla``: ``get_mla_metadata``, ``flash_mla_with_kvcache``,
``flash_mla_sparse_fwd``) on :class:`mlakit.LatentAttention`, for engines written against
deepseek-ai/FlashMLA (vLLM's FLASHMLA and FLASHMLA_SPARSE backends, SGLang's):

    import mlakit.flash_mla as flash_mla          # instead of: import flash_mla

    sched, _ = flash_mla.get_mla_metadata()       # once a step
    for layer in layers:
        out, lse = flash_mla.flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, 512, sched,
                                                    softmax_scale=scale, causal=True)

What changes against FlashMLA:

- **Any page size and head count**: ``k_cache`` pages of 1 to 256 rows (a power of two), 1 to 128
  heads, on Hopper GPUs and on the CPU (CPU tensors run the CPU backend).
- **The dense cache may be FP8** (``is_fp8_kvcache=True`` with DeepSeek-V3.2's 656-byte rows),
  and sparse attention may read the 16-bit cache (``is_fp8_kvcache=False``).
- **Planning**: as FlashMLA's, the schedule is made by the first call on a ``sched`` and reused
  by the calls after it, which must keep the shapes and the values of ``cache_seqlens`` and
  ``topk_length``. mlakit plans on the host, so that first dense call copies ``cache_seqlens`` to
  the host (one synchronization a step, not a layer). Engines that replay CUDA graphs use
  :class:`mlakit.LatentAttention` itself, planned outside the capture.
- ``extra_k_cache``, ``extra_indices_in_kvcache``, ``extra_topk_length`` (a second cache) and
  ``flash_mla_sparse_fwd``'s ``indexer_topk`` are not supported: they raise ``ValueError``.

Everything else is FlashMLA's: ``q [b, s_q, h_q, 576]``, ``k_cache [num_blocks, page, 1, 576]``
(``[..., 656]`` uint8 or float8 for FP8), ``block_table [b, cols]`` int32, ``cache_seqlens [b]``
int32 (each request's cached tokens, its new ones included), the default scale ``576**-0.5``,
causal rows bottom-right aligned, ``indices [b, s_q, topk]`` global slots (``block * page +
offset``, -1 = none), ``topk_length [b]``, ``attn_sink [h_q]``; ``out [b, s_q, h_q, 512]`` and
``lse [b, h_q, s_q]`` (natural log; **+inf** for a row that sees no key, whose ``out`` is 0).
``flash_mla_sparse_fwd(q [s_q, h_q, 576], kv [s_kv, 1, 576], indices [s_q, 1, topk], sm_scale)``
returns ``(out [s_q, h_q, 512], max_logits [s_q, h_q], lse [s_q, h_q])``; entries -1 or ``>= s_kv``
are skipped, ``topk_length [s_q]`` is per token.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch

from .latent import LatentAttention

__all__ = ["FlashMLASchedMeta", "get_mla_metadata", "flash_mla_with_kvcache", "flash_mla_sparse_fwd"]

_L, _R, _FP8_ROW = 512, 64, 656


@dataclasses.dataclass
class FlashMLASchedMeta:
    """A step's schedule: made by the first :func:`flash_mla_with_kvcache` call on it, reused by
    the calls after it (the layers of the step), which must pass the same shapes and lengths."""

    have_initialized: bool = False
    config: Optional[tuple] = None   # what the first call planned for; later calls must match
    attn: Optional[LatentAttention] = None
    token_lengths: Optional[tuple] = None  # (the caller's topk_length [b], it per token [b * s_q])


def get_mla_metadata(*args: Any, **kwargs: Any) -> Tuple[FlashMLASchedMeta, None]:
    """An empty schedule, as FlashMLA's: ``(sched, None)``. The arguments of FlashMLA's older
    interface are accepted and not needed."""
    return FlashMLASchedMeta(), None


# Idle LatentAttention objects by static config. A schedule takes one when its first call plans
# and gives it back when the schedule is dropped, so schedules alive at once (a step's decode and
# its draft model's) never share a plan, and a step reuses the object of the step before it. The
# capacities a config was asked for grow by doubling, and an object too small is replaced.
_idle: Dict[tuple, List[LatentAttention]] = {}
_capacity: Dict[tuple, Tuple[int, int, int, int]] = {}


def _take(key: tuple, need: Tuple[int, int, int, int]) -> LatentAttention:
    device, dtype, heads, page, num_blocks, cache_dtype = key
    asked = _capacity.get(key, (0, 0, 0, 0))
    cap = tuple(max(n, 2 * a) if n > a else a for n, a in zip(need, asked))
    _capacity[key] = cap
    idle = _idle.setdefault(key, [])
    while idle:
        attn = idle.pop()
        have = (attn.max_batch, attn.max_q_tokens, attn.max_kv_tokens, attn.max_topk)
        if all(h >= c for h, c in zip(have, cap)):  # every capacity, not tuple order
            return attn
    return LatentAttention(heads, dtype=dtype, device=device, block_size=page, num_blocks=num_blocks,
                           max_batch=max(cap[0], 1), max_q_tokens=max(cap[1], 1), max_kv_tokens=cap[2],
                           max_topk=cap[3], kv_cache_dtype=cache_dtype)


def _give_back(key: tuple, attn: LatentAttention) -> None:
    _idle.setdefault(key, []).append(attn)


def _cache_3d(k_cache: torch.Tensor, fp8: bool, name: str) -> torch.Tensor:
    """``[num_blocks, page, 1, D]`` -> ``[num_blocks, page, D]`` (one KV head, as FlashMLA needs)."""
    if k_cache.dim() != 4 or k_cache.shape[2] != 1:
        raise ValueError(f"mlakit: {name}: expected [num_blocks, page_block_size, 1, head_dim], "
                         f"got {list(k_cache.shape)}")
    width = _FP8_ROW if fp8 else _L + _R
    if k_cache.shape[3] != width:
        raise ValueError(f"mlakit: {name}: the last dimension must be {width} "
                         f"({'656-byte fp8_ds_mla rows' if fp8 else '576 = 512 + 64'}), got {k_cache.shape[3]}")
    return k_cache[:, :, 0, :]


def _lse_flashmla(lse: torch.Tensor) -> torch.Tensor:
    """mlakit's -inf for a row that sees no key -> FlashMLA's +inf, in place (one small kernel a
    call; NaN stays NaN)."""
    return lse.nan_to_num_(nan=math.nan, posinf=math.inf, neginf=math.inf)


def _no_extra_cache(**extra: Any) -> None:
    for name, value in extra.items():
        if value is not None:
            raise ValueError(f"mlakit: {name}: a second cache is not supported (pass None)")


def flash_mla_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, block_table: Optional[torch.Tensor],
                           cache_seqlens: Optional[torch.Tensor], head_dim_v: int,
                           tile_scheduler_metadata: FlashMLASchedMeta, num_splits: None = None,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           is_fp8_kvcache: bool = False, indices: Optional[torch.Tensor] = None,
                           attn_sink: Optional[torch.Tensor] = None, extra_k_cache: Optional[torch.Tensor] = None,
                           extra_indices_in_kvcache: Optional[torch.Tensor] = None,
                           topk_length: Optional[torch.Tensor] = None,
                           extra_topk_length: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's decode (dense: ``indices`` None) and sparse decode; see the module's doc.
    Returns ``(out [b, s_q, h_q, 512], lse [b, h_q, s_q])``."""
    sched = tile_scheduler_metadata
    if not isinstance(sched, FlashMLASchedMeta):
        raise ValueError("mlakit: tile_scheduler_metadata: must come from mlakit.flash_mla.get_mla_metadata()")
    if num_splits is not None:
        raise ValueError("mlakit: num_splits: must be None")
    if head_dim_v != _L:
        raise ValueError(f"mlakit: head_dim_v: must be {_L}, got {head_dim_v}")
    _no_extra_cache(extra_k_cache=extra_k_cache, extra_indices_in_kvcache=extra_indices_in_kvcache,
                    extra_topk_length=extra_topk_length)
    if q.dim() != 4:
        raise ValueError(f"mlakit: q: expected [batch_size, seq_len_q, num_heads_q, 576], got {list(q.shape)}")
    b, s_q, h_q, _ = q.shape
    sparse = indices is not None
    if sparse and causal:
        raise ValueError("mlakit: causal: must be False when indices is given (sparse attention)")
    if not sparse and (topk_length is not None):
        raise ValueError("mlakit: topk_length: only with indices (sparse attention)")
    cache = _cache_3d(k_cache, is_fp8_kvcache, "k_cache")
    topk = int(indices.shape[-1]) if sparse else 0
    config = (b, s_q, h_q, tuple(k_cache.shape), bool(causal), bool(is_fp8_kvcache), topk)
    if sched.have_initialized:
        if config != sched.config:
            raise ValueError(f"mlakit: tile_scheduler_metadata: planned for (batch, seq_len_q, heads, k_cache shape, "
                             f"causal, fp8, topk) = {sched.config}, called with {config}; a schedule serves "
                             f"the calls of one step (call get_mla_metadata() again for a new one)")
    else:
        query_lens = [s_q] * b
        if sparse:
            kv_total, kv_lens, table = 0, None, None
        else:
            if block_table is None or cache_seqlens is None:
                raise ValueError("mlakit: block_table, cache_seqlens: both are needed for dense attention")
            kv_lens = cache_seqlens.tolist()  # the host copy FlashMLA's planning kernel avoids
            kv_total = int(sum(kv_lens))
            table = block_table if block_table.is_cuda else block_table.to(torch.int32)
        key = (str(q.device), q.dtype, h_q, cache.shape[1], cache.shape[0], "fp8_ds_mla" if is_fp8_kvcache else "auto")
        attn = _take(key, (b, b * s_q, kv_total, topk))
        try:
            attn.plan(query_lens, kv_lens, table, causal=bool(causal), sm_scale=softmax_scale, topk=topk,
                      indices="slots" if sparse else "positions")
        except Exception:
            _give_back(key, attn)
            raise
        weakref.finalize(sched, _give_back, key, attn)
        sched.attn, sched.config, sched.have_initialized = attn, config, True
    attn = sched.attn
    t = b * s_q
    lengths = None
    if topk_length is not None:
        lengths = topk_length.to(torch.int32)
        if s_q > 1:  # per request -> per token; the step's layers pass the same values
            if sched.token_lengths is None or sched.token_lengths[0] is not topk_length:
                sched.token_lengths = (topk_length, lengths.repeat_interleave(s_q))
            lengths = sched.token_lengths[1]
    out, lse = attn.run(q.reshape(t, h_q, q.shape[3]), cache,
                        indices=None if not sparse else indices.reshape(t, topk),
                        topk_length=lengths, attn_sink=attn_sink, return_lse=True)
    lse = _lse_flashmla(lse)
    # [T, H] -> FlashMLA's [b, h_q, s_q]: the same memory when s_q is 1, a copy otherwise.
    lse = lse.view(b, h_q, 1) if s_q == 1 else lse.view(b, s_q, h_q).permute(0, 2, 1).contiguous()
    return out.view(b, s_q, h_q, _L), lse


def flash_mla_sparse_fwd(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float, d_v: int = 512,
                         attn_sink: Optional[torch.Tensor] = None, topk_length: Optional[torch.Tensor] = None,
                         indexer_topk: int = 0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashMLA's sparse prefill: every query token over its own ``indices`` rows of the flat
    ``kv``; see the module's doc. Returns ``(out, max_logits, lse)``."""
    if d_v != _L:
        raise ValueError(f"mlakit: d_v: must be {_L}, got {d_v}")
    if indexer_topk:
        raise ValueError("mlakit: indexer_topk: not supported (pass 0)")
    if q.dim() != 3:
        raise ValueError(f"mlakit: q: expected [s_q, h_q, 576], got {list(q.shape)}")
    if kv.dim() != 3 or kv.shape[1] != 1:
        raise ValueError(f"mlakit: kv: expected [s_kv, 1, 576], got {list(kv.shape)}")
    if indices.dim() != 3 or indices.shape[1] != 1:
        raise ValueError(f"mlakit: indices: expected [s_q, 1, topk], got {list(indices.shape)}")
    s_q, h_q, _ = q.shape
    topk = int(indices.shape[2])
    # The flat rows as a cache of one-row pages: row r is slot r, so indices are slots as they are.
    key = (str(q.device), q.dtype, h_q, 1, kv.shape[0], "auto")
    attn = _take(key, (1, s_q, 0, topk))
    try:
        attn.plan([s_q], None, None, sm_scale=sm_scale, topk=topk, indices="slots")
        out, lse, max_logits = attn.run(q, kv, indices=indices.reshape(s_q, topk),
                                        topk_length=None if topk_length is None else topk_length.to(torch.int32),
                                        attn_sink=attn_sink, return_lse=True, return_max_logits=True)
    finally:
        _give_back(key, attn)  # run() only launched: the plan's next user is stream-ordered after it
    return out, max_logits, _lse_flashmla(lse)
