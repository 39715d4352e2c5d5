"""``flash_attn_varlen_func`` with FlashAttention's signature, on mlakit's plan/run split.

Exported as :func:`mlakit.torch.flash_attn_varlen_func` (see its docstring for the contract).
The function itself is a thin wrapper that checks the FlashAttention arguments mlakit does not
support and calls one of three ``torch.library`` custom ops (so it traces under
``torch.compile``); the ops' implementation keeps a small cache of :class:`mlakit.RaggedPrefill`
objects and plans one only when the lengths it serves change.

Plan cache. One RaggedPrefill per (device, dtype, heads, head dims, masking options and, for
CUDA offsets, the addresses of the ``cu_seqlens_q`` / ``cu_seqlens_k`` tensors). Keying on the
addresses keeps calls that use different offset tensors in one forward pass (MLA's new-token
attention and each context chunk) on separate plans, so none of them re-plans per layer, and
so each captured graph node reads a plan that :func:`varlen_replan` can update before a replay.

How a call knows whether the lengths changed, without synchronizing the device: it compares
the host copies of ``cu_seqlens_q`` / ``cu_seqlens_k`` with those of the plan in force. Host
copies are the tensors themselves when they are CPU tensors, or the optional
``cu_seqlens_q_cpu`` / ``cu_seqlens_k_cpu`` arguments (engines keep them: vLLM's
``query_start_loc_cpu``). With CUDA ``cu_seqlens`` and no host copies the values must be read
back, which waits for the current stream: correct, but it costs a synchronization per call.
"""

from __future__ import annotations

import collections
from typing import Any, Optional, Tuple

import torch

import mlakit as _mlakit

Tensor = torch.Tensor

# LRU bound on cached plans; entries used by a captured CUDA graph are never evicted (the graph
# reads their device workspace on every replay).
_MAX_PLANS = 64


class _Plan:
    __slots__ = ("attn", "lengths", "captured", "capacity")

    def __init__(self, attn: Any, capacity: Tuple[int, int, int]) -> None:
        self.attn = attn            # mlakit.RaggedPrefill with fixed capacities
        self.capacity = capacity    # (max_batch, max_q_tokens, max_kv_tokens)
        self.lengths: Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]] = None  # plan in force
        self.captured = False       # used inside a CUDA graph capture


_plans: "collections.OrderedDict[tuple, _Plan]" = collections.OrderedDict()


def _host_values(t: Optional[Tensor], name: str) -> Optional[Tuple[int, ...]]:
    if t is None:
        return None
    if t.dim() != 1:
        raise ValueError(f"mlakit: {name}: must be 1-D (batch_size + 1 offsets), got shape {list(t.shape)}")
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"mlakit: {name}: must be int32 or int64, got {t.dtype}")
    return tuple(t.tolist())  # a CUDA tensor is copied back here (waits for its stream)


def _capacity(q: Tensor, k: Tensor, batch: int, old: Optional[_Plan]) -> Tuple[int, int, int]:
    # Sized by the buffers (capacity-sized buffers give the capacity); an existing plan's
    # capacity is kept when it suffices, so a CUDA graph's plan object is never replaced.
    want = (max(batch, 1), max(q.shape[0], 1), max(k.shape[0], 1))
    if old is not None and all(w <= c for w, c in zip(want, old.capacity)):
        return old.capacity
    if old is None:
        return want
    return tuple(max(w, 2 * c if w > c else c) for w, c in zip(want, old.capacity))  # type: ignore[return-value]


def _lookup(key: tuple) -> Optional[_Plan]:
    p = _plans.get(key)
    if p is not None:
        _plans.move_to_end(key)
    return p


def _insert(key: tuple, p: _Plan) -> None:
    _plans[key] = p
    _plans.move_to_end(key)
    if len(_plans) > _MAX_PLANS:
        for old_key in list(_plans):
            if len(_plans) <= _MAX_PLANS:
                break
            if not _plans[old_key].captured and old_key != key:
                del _plans[old_key]


def _check_inputs(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError(f"mlakit: {name}: must be [tokens, heads, head_dim], got shape {list(t.shape)}")
    if q.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"mlakit: q: dtype {q.dtype} is not supported (bfloat16 or float16)")


def _run(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
         cu_seqlens_q_cpu: Optional[Tensor], cu_seqlens_k_cpu: Optional[Tensor], softmax_scale: float,
         causal: bool, window_left: int, softcap: float, out: Tensor, lse: Optional[Tensor]) -> None:
    """Plans if the lengths changed, then launches into out (and lse, [H, rows])."""
    _check_inputs(q, k, v)
    heads, kv_heads = q.shape[1], k.shape[1]
    # CUDA offsets (FlashAttention's case, and the only one a graph can replay with new values)
    # are told apart by address; host offsets share one plan per configuration.
    cu = (cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()) if cu_seqlens_q.is_cuda else (None, None)
    key = (q.device, q.dtype, heads, kv_heads, q.shape[2], v.shape[2], bool(causal), int(window_left),
           float(softmax_scale), float(softcap)) + cu
    plan = _lookup(key)
    host_q = cu_seqlens_q_cpu if cu_seqlens_q_cpu is not None else (None if cu_seqlens_q.is_cuda else cu_seqlens_q)
    host_k = cu_seqlens_k_cpu if cu_seqlens_k_cpu is not None else (None if cu_seqlens_k.is_cuda else cu_seqlens_k)
    capturing = q.is_cuda and torch.cuda.is_current_stream_capturing()
    if capturing:
        # No plan can be made (nor lengths read back) while a graph is captured: the plan in
        # force is what the captured launch will read, and varlen_replan() updates it.
        if plan is None:
            raise RuntimeError(
                "mlakit: cu_seqlens_q: no plan for these cu_seqlens tensors; call flash_attn_varlen_func once "
                "with them before capturing a CUDA graph (a plan cannot be made during capture)")
        if host_q is not None and host_k is not None:
            lengths = (_host_values(host_q, "cu_seqlens_q_cpu"), _host_values(host_k, "cu_seqlens_k_cpu"))
            if lengths != plan.lengths:
                raise RuntimeError(
                    "mlakit: cu_seqlens_q: the lengths differ from the plan in force and a plan cannot be made "
                    "during CUDA graph capture; run once with these lengths (or call "
                    "mlakit.torch.varlen_replan) before capturing")
        plan.captured = True
    else:
        lengths = (_host_values(host_q if host_q is not None else cu_seqlens_q, "cu_seqlens_q"),
                   _host_values(host_k if host_k is not None else cu_seqlens_k, "cu_seqlens_k"))
        if not lengths[0]:
            raise ValueError("mlakit: cu_seqlens_q: must have batch_size + 1 >= 1 entries, got 0")
        if len(lengths[0]) != len(lengths[1]):
            raise ValueError(f"mlakit: cu_seqlens_k: has {len(lengths[1])} entries but cu_seqlens_q has "
                             f"{len(lengths[0])}")
        # Checked here, before a plan is sized from these tensors, so the error names the tensor.
        for name, t, total, cu in (("q", q, lengths[0][-1], "cu_seqlens_q"), ("k", k, lengths[1][-1], "cu_seqlens_k"),
                                   ("v", v, lengths[1][-1], "cu_seqlens_k")):
            if t.shape[0] < total:
                raise ValueError(f"mlakit: {name}: has {t.shape[0]} rows, fewer than the {total} tokens {cu} totals")
        capacity = _capacity(q, k, len(lengths[0]) - 1, plan)
        if plan is None or capacity != plan.capacity:
            if plan is not None and plan.captured:
                raise ValueError(
                    f"mlakit: q: buffers ({q.shape[0]} q rows, {k.shape[0]} kv rows, {len(lengths[0]) - 1} "
                    f"sequences) exceed the capacity {plan.capacity} of a plan a CUDA graph captured; "
                    "use new cu_seqlens tensors for larger buffers")
            attn = _mlakit.RaggedPrefill(heads, kv_heads, q.shape[2], v.shape[2], dtype=q.dtype, device=q.device,
                                         max_batch=capacity[0], max_q_tokens=capacity[1],
                                         max_kv_tokens=capacity[2])
            plan = _Plan(attn, capacity)
            _insert(key, plan)
        if lengths != plan.lengths:
            plan.attn.plan(lengths[0], lengths[1], causal=causal, sm_scale=softmax_scale or None,
                           window_left=window_left, logits_soft_cap=softcap or None,
                           stream=_stream(q))
            plan.lengths = lengths
    native = _mlakit._native
    plan.attn._impl.run(native(q), native(k), native(v), native(out),
                        None if lse is None else native(lse.T), _stream(q))


def _stream(t: Tensor) -> int:
    return _mlakit._torch_current_stream(t.device) if t.is_cuda else 0


def varlen_replan(cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, cu_seqlens_q_cpu: Any, cu_seqlens_k_cpu: Any) -> int:
    """Re-plans every cached plan that serves these ``cu_seqlens`` tensors (matched by address)
    for the lengths in the host copies, and returns how many it re-planned.

    For CUDA graphs: a graph replays the launches it captured, which read their plan from the
    device; call this (outside the capture, on the stream the graph is launched on) after
    writing the new lengths into the static ``cu_seqlens`` buffers and before replaying.
    """
    lengths = (_host_values(_as_host(cu_seqlens_q_cpu), "cu_seqlens_q_cpu"),
               _host_values(_as_host(cu_seqlens_k_cpu), "cu_seqlens_k_cpu"))
    ptrs = (cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr())
    need = (len(lengths[0]) - 1, lengths[0][-1], lengths[1][-1])
    n = 0
    for key, plan in list(_plans.items()):
        if key[-2:] != ptrs:
            continue
        if any(w > c for w, c in zip(need, plan.capacity)):
            # Plans are found by the cu_seqlens addresses, which the caching allocator hands out
            # again once a tensor is freed: a plan too small for these lengths was made for
            # other, smaller buffers. Unless a graph captured it, it is stale: drop it.
            if plan.captured:
                raise ValueError(
                    f"mlakit: cu_seqlens_q: {need[0]} sequences, {need[1]} q and {need[2]} kv tokens exceed the "
                    f"capacity {plan.capacity} of a plan a CUDA graph captured")
            del _plans[key]
            continue
        _device, _dtype, _h, _hkv, _dqk, _dvo, causal, window_left, scale, softcap = key[:10]
        if lengths != plan.lengths:
            plan.attn.plan(lengths[0], lengths[1], causal=causal, sm_scale=scale or None, window_left=window_left,
                           logits_soft_cap=softcap or None,
                           stream=_mlakit._torch_current_stream(_device) if _device.type == "cuda" else None)
            plan.lengths = lengths
        n += 1
    return n


def _as_host(x: Any) -> Tensor:
    if isinstance(x, Tensor):
        if x.is_cuda:
            raise TypeError("mlakit: cu_seqlens_q_cpu: must be a host (CPU) tensor or a list of ints")
        return x
    return torch.tensor(list(x), dtype=torch.int32)


# -- custom ops ----------------------------------------------------------------------------------

@torch.library.custom_op("mlakit::flash_attn_varlen_out", mutates_args=("out", "lse"))
def _varlen_out(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                cu_seqlens_q_cpu: Optional[Tensor], cu_seqlens_k_cpu: Optional[Tensor], softmax_scale: float,
                causal: bool, window_left: int, softcap: float, out: Tensor, lse: Optional[Tensor]) -> None:
    _run(q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu, softmax_scale, causal,
         window_left, softcap, out, lse)


@_varlen_out.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu, softmax_scale, causal,
      window_left, softcap, out, lse):
    return None


def _out_like(q: Tensor, v: Tensor) -> Tensor:
    return q.new_empty((q.shape[0], q.shape[1], v.shape[2]))


def _lse_like(q: Tensor) -> Tensor:
    return q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.custom_op("mlakit::flash_attn_varlen", mutates_args=())
def _varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
            cu_seqlens_q_cpu: Optional[Tensor], cu_seqlens_k_cpu: Optional[Tensor], softmax_scale: float,
            causal: bool, window_left: int, softcap: float) -> Tensor:
    out = _out_like(q, v)
    _run(q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu, softmax_scale, causal,
         window_left, softcap, out, None)
    return out


@_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu, softmax_scale, causal,
      window_left, softcap):
    return _out_like(q, v)


@torch.library.custom_op("mlakit::flash_attn_varlen_with_lse", mutates_args=())
def _varlen_with_lse(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                     cu_seqlens_q_cpu: Optional[Tensor], cu_seqlens_k_cpu: Optional[Tensor],
                     softmax_scale: float, causal: bool, window_left: int,
                     softcap: float) -> Tuple[Tensor, Tensor]:
    out, lse = _out_like(q, v), _lse_like(q)
    _run(q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu, softmax_scale, causal,
         window_left, softcap, out, lse)
    return out, lse


@_varlen_with_lse.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu, softmax_scale, causal,
      window_left, softcap):
    return _out_like(q, v), _lse_like(q)


# -- the FlashAttention-compatible entry point ---------------------------------------------------

def _unsupported(name: str, why: str) -> ValueError:
    return ValueError(f"mlakit: {name}: {why} (not supported by mlakit.torch.flash_attn_varlen_func)")


def _window(window_size: Any, causal: bool) -> Tuple[int, bool]:
    """FlashAttention's (left, right) window -> (window_left, causal). A negative side means
    unlimited; right == 0 is the causal diagonal; a right window > 0 has no mlakit equivalent."""
    if window_size is None:
        return -1, causal
    try:
        left, right = (int(x) for x in window_size)
    except (TypeError, ValueError):
        raise ValueError(f"mlakit: window_size: must be a (left, right) pair of ints, got {window_size!r}") from None
    if right > 0 and not causal:
        raise _unsupported("window_size", f"a right window (window_size[1] = {right} > 0)")
    return (left if left >= 0 else -1), (causal or right == 0)


def flash_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                           max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           window_size: Any = (-1, -1), softcap: float = 0.0, alibi_slopes: Any = None,
                           deterministic: bool = False, return_attn_probs: bool = False,
                           block_table: Any = None, *, return_softmax_lse: bool = False,
                           out: Optional[Tensor] = None, cu_seqlens_q_cpu: Any = None,
                           cu_seqlens_k_cpu: Any = None) -> Any:
    """FlashAttention's ``flash_attn_varlen_func`` on mlakit (forward only).

    Arguments and results as in flash-attn 2 (and vLLM's fork): ``q [total_q, H, Dqk]``,
    ``k [total_k, Hkv, Dqk]``, ``v [total_k, Hkv, Dv]`` (``Dv`` may differ from ``Dqk``, e.g.
    MLA's 192/128: no padding of V), ``cu_seqlens_*`` int32 offsets (``batch + 1``, on the device
    or the host). Tensors may hold more rows than ``cu_seqlens_*[-1]`` (capacity-sized buffers):
    rows past the batch are neither read nor written (``out`` rows there are left as they were).
    ``softmax_scale`` (default ``1/sqrt(Dqk)``), ``causal`` (bottom-right aligned),
    ``window_size=(left, right)`` (``right`` must be ``-1``, or ``0`` = causal), ``softcap``.
    ``max_seqlen_*`` and ``deterministic`` are accepted and not needed (mlakit is deterministic).

    Returns ``out [total_q, H, Dv]``; with ``return_softmax_lse=True`` ``(out, softmax_lse)``,
    ``softmax_lse [H, total_q]`` float32 (natural log; ``-inf`` for a row with no key, where
    FlashAttention-2 writes ``+inf``); with ``return_attn_probs=True`` ``(out, softmax_lse,
    None)``: the probabilities are never materialized. ``out=`` writes into a preallocated
    tensor.

    Not supported (ValueError): ``dropout_p > 0``, ``alibi_slopes``, a right window,
    ``block_table`` (paged KV).

    Planning: ``cu_seqlens_q_cpu`` / ``cu_seqlens_k_cpu`` (host copies of the offsets; CPU
    tensors or lists) let a call with CUDA ``cu_seqlens`` decide on the host whether the plan in
    force still fits; without them CUDA offsets are read back (a synchronization per call). A
    plan is made only when the lengths change. Under ``torch.compile`` the call is one custom op.
    Under CUDA graphs: call once outside the capture with the same (static) tensors, capture,
    then before each replay write the new offsets and call :func:`mlakit.torch.varlen_replan`.
    """
    if dropout_p and dropout_p > 0.0:
        raise _unsupported("dropout_p", f"dropout ({dropout_p})")
    if alibi_slopes is not None:
        raise _unsupported("alibi_slopes", "ALiBi")
    if block_table is not None:
        raise _unsupported("block_table", "a paged KV cache")
    if softcap is None or softcap < 0.0:
        raise ValueError(f"mlakit: softcap: must be >= 0 (0 = off), got {softcap}")
    if softmax_scale is not None and not softmax_scale > 0.0:
        raise ValueError(f"mlakit: softmax_scale: must be > 0 or None, got {softmax_scale}")
    window_left, causal = _window(window_size, bool(causal))
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    host_q = None if cu_seqlens_q_cpu is None else _as_host(cu_seqlens_q_cpu)
    host_k = None if cu_seqlens_k_cpu is None else _as_host(cu_seqlens_k_cpu)
    want_lse = return_softmax_lse or return_attn_probs
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, host_q, host_k, scale, causal, window_left, float(softcap))
    if out is not None:
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32) if want_lse else None
        torch.ops.mlakit.flash_attn_varlen_out(*args, out, lse)
    elif want_lse:
        out, lse = torch.ops.mlakit.flash_attn_varlen_with_lse(*args)
    else:
        out, lse = torch.ops.mlakit.flash_attn_varlen(*args), None
    if return_attn_probs:
        return out, lse, None
    if return_softmax_lse:
        return out, lse
    return out


__all__ = ["flash_attn_varlen_func", "varlen_replan"]
