"""PyTorch custom ops for mlakit (``torch.library``), usable under ``torch.compile`` and inside
CUDA graphs.

Ops (namespace ``mlakit``; all forward-only, no autograd):

``torch.ops.mlakit.ragged_prefill(q, k, v, handle) -> out``
    Functional: allocates ``out [total_q, H, Dvo]`` (q's dtype; the plan's ``out_dtype`` for
    ``float8_e4m3fn`` inputs). Mutates nothing.
``torch.ops.mlakit.ragged_prefill_with_lse(q, k, v, handle) -> (out, lse)``
    Functional, also returns ``lse [total_q, H]`` float32. Mutates nothing.
``torch.ops.mlakit.ragged_prefill_out(q, k, v, out, lse, handle) -> ()``
    **Mutates ``out`` and ``lse``** (``lse`` may be None). Use this for CUDA graphs whose
    replays change the batch: preallocate ``out`` at capacity and pass views of it.
``torch.ops.mlakit.merge_states(out_a, lse_a, out_b, lse_b) -> (out, lse)``
    Functional. Mutates nothing.
``torch.ops.mlakit.merge_states_(out_a, lse_a, out_b, lse_b) -> ()``
    **Mutates ``out_a`` and ``lse_a``** (in-place merge of b into a).
``torch.ops.mlakit.merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse) -> ()``
    vLLM's merge: **mutates ``output`` and ``output_lse``**; LSE tensors ``[H, T]``.
``torch.ops.mlakit.flash_attn_varlen[_with_lse|_out](...)``
    Behind :func:`flash_attn_varlen_func` (FlashAttention's signature; ``_out`` mutates
    ``out`` and ``lse``). Plans on demand; see that function.

Drop-in functions for engines written against FlashAttention / vLLM:
:func:`flash_attn_varlen_func` (with :func:`varlen_replan` for CUDA graphs and
:func:`varlen_trust_version` for offsets written behind PyTorch's back) and
:func:`merge_attn_states`.
``torch.ops.mlakit.mla_step_out(q, kv_c, k_pe, kv_b_proj, kv_cache, out, lse, handle, k_scale=None, indices=None, topk_length=None) -> ()``
    One layer of an :class:`mlakit.MlaStep`'s plan. **Mutates ``kv_cache``, ``out`` and ``lse``**.
``torch.ops.mlakit.latent_attention(q, kv_cache, handle, q_pe, indices, topk_length, attn_sink, k_scale) -> out``
    One layer of a :class:`mlakit.LatentAttention`'s plan (``q_pe`` .. ``k_scale`` optional;
    ``k_scale``: an ``"fp8"`` cache's layer scale). Functional. ``latent_attention_with_lse(...,
    lse_head_major, k_scale) -> (out, lse)`` likewise.
``torch.ops.mlakit.latent_attention_out(q, kv_cache, out, lse, max_logits, handle, q_pe, indices, topk_length, attn_sink, k_scale) -> ()``
    The same into preallocated tensors: **mutates ``out``, ``lse`` and ``max_logits``** (the last
    two may be None).

The ``ragged_prefill*`` ops also take FP8 inputs (``torch.float8_e4m3fn``) with optional
``q_descale`` / ``k_descale`` / ``v_descale`` (float32 ``[>= batch, Hkv]``, FlashAttention-3's).

Custom ops take tensors and scalars only, so a plan is named by ``handle``, the integer that
:class:`mlakit.RaggedPrefill` registers itself under (``attn.handle``); the op looks it up when it
runs. Call :meth:`mlakit.RaggedPrefill.plan` outside the compiled/captured region (it runs on the
host). ``run`` reads everything batch-dependent from the plan's device workspace, so a graph that
captured one of these ops can be replayed after ``plan()`` with new lengths (same tensors, batch
within the capacities given at construction).

Every op runs on PyTorch's current CUDA stream (for CUDA tensors) or on the CPU backend (for CPU
tensors).

The helper functions below (:func:`ragged_prefill`, :func:`ragged_prefill_out`,
:func:`merge_attn_states`, ...) call the implementation directly when not compiling and no torch
dispatch mode is active (eager engines): the ``torch.library`` dispatch of a Python custom op
costs ~15-20 µs per call. Under ``torch.compile`` (and fake tensors, ``make_fx``) they go
through ``torch.ops.mlakit.*``, so the call traces as one op. Both run the same code.
"""


from typing import Optional, Tuple

import torch

import mlakit as _mlakit
from mlakit import RaggedPrefill
from mlakit._varlen import _direct, flash_attn_varlen_func, varlen_replan, varlen_trust_version

__all__ = [
    "RaggedPrefill",
    "ragged_prefill",
    "ragged_prefill_out",
    "merge_states",
    "merge_states_",
    "merge_attn_states",
    "flash_attn_varlen_func",
    "varlen_replan",
    "varlen_trust_version",
    "mla_step_out",
    "latent_attention",
    "latent_attention_out",
]

Tensor = torch.Tensor


# The extension takes torch tensors as they are (it reads their metadata itself, once torch is
# registered with it) and, given stream None, launches on PyTorch's current stream of the first
# tensor's device (during CUDA graph capture the capturing stream, so the launch is captured).
_mlakit._register_torch()


def _prefill(plan: RaggedPrefill, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor],
             q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
             v_descale: Optional[Tensor] = None) -> None:
    """The body of the ragged_prefill ops; lse is a [rows, H] view (or None)."""
    if q_descale is None and k_descale is None and v_descale is None:
        plan._impl.run(q, k, v, out, lse, None)
    else:
        plan._impl.run(q, k, v, out, lse, None, False, q_descale, k_descale, v_descale)


def _out_shape(q: Tensor, v: Tensor) -> Tuple[int, int, int]:
    return (q.shape[0], q.shape[1], v.shape[2])


_FP8 = getattr(torch, "float8_e4m3fn", None)
_OUT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _new_out(q: Tensor, v: Tensor, handle: int) -> Tensor:
    """The output of a ragged_prefill op: q's dtype, or the plan's out_dtype for FP8 inputs."""
    if q.dtype is _FP8:
        return q.new_empty(*_out_shape(q, v), dtype=_OUT_DTYPES[_mlakit._lookup(handle).out_dtype])
    return q.new_empty(*_out_shape(q, v))


# -- ragged prefill ----------------------------------------------------------------------------

@torch.library.custom_op("mlakit::ragged_prefill_out", mutates_args=("out", "lse"))
def _ragged_prefill_out(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor],
                        handle: int, q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
                        v_descale: Optional[Tensor] = None) -> None:
    _prefill(_mlakit._lookup(handle), q, k, v, out, lse, q_descale, k_descale, v_descale)


@_ragged_prefill_out.register_fake
def _(q, k, v, out, lse, handle, q_descale=None, k_descale=None, v_descale=None):
    return None


@torch.library.custom_op("mlakit::ragged_prefill", mutates_args=())
def _ragged_prefill(q: Tensor, k: Tensor, v: Tensor, handle: int, q_descale: Optional[Tensor] = None,
                    k_descale: Optional[Tensor] = None, v_descale: Optional[Tensor] = None) -> Tensor:
    out = _new_out(q, v, handle)
    _prefill(_mlakit._lookup(handle), q, k, v, out, None, q_descale, k_descale, v_descale)
    return out


@_ragged_prefill.register_fake
def _(q, k, v, handle, q_descale=None, k_descale=None, v_descale=None):
    return _new_out(q, v, handle)


def _lse_shape(q: Tensor, head_major: bool) -> Tuple[int, int]:
    return (q.shape[1], q.shape[0]) if head_major else (q.shape[0], q.shape[1])


@torch.library.custom_op("mlakit::ragged_prefill_with_lse", mutates_args=())
def _ragged_prefill_with_lse(q: Tensor, k: Tensor, v: Tensor, handle: int, lse_head_major: bool = False,
                             q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
                             v_descale: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    return _prefill_with_lse(_mlakit._lookup(handle), q, k, v, lse_head_major, q_descale, k_descale, v_descale)


def _prefill_with_lse(plan: RaggedPrefill, q: Tensor, k: Tensor, v: Tensor, lse_head_major: bool,
                      q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
                      v_descale: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    out = _new_out(q, v, plan.handle)
    lse = q.new_empty(*_lse_shape(q, lse_head_major), dtype=torch.float32)
    # [H, T]: read transposed, no .T view
    plan._impl.run(q, k, v, out, lse, None, lse_head_major, q_descale, k_descale, v_descale)
    return out, lse


@_ragged_prefill_with_lse.register_fake
def _(q, k, v, handle, lse_head_major=False, q_descale=None, k_descale=None, v_descale=None):
    return (_new_out(q, v, handle),
            q.new_empty(_lse_shape(q, lse_head_major), dtype=torch.float32))


# -- merge_states ------------------------------------------------------------------------------

@torch.library.custom_op("mlakit::merge_states", mutates_args=())
def _merge_states(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> Tuple[Tensor, Tensor]:
    return _merged(out_a, lse_a, out_b, lse_b)


def _merged(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> Tuple[Tensor, Tensor]:
    out = torch.empty_like(out_a, memory_format=torch.contiguous_format)
    lse = torch.empty_like(lse_a, memory_format=torch.contiguous_format)
    _merge_into(out_a, lse_a, out_b, lse_b, out, lse)
    return out, lse


def _merge_into(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor, out: Tensor, lse: Tensor) -> None:
    try:
        _mlakit._C.merge_states(out_a, lse_a, out_b, lse_b, out, lse, None)
    except ValueError as e:  # a try costs nothing until it raises
        raise _mlakit._merge_error(e, out_a, (("lse_a", lse_a), ("lse_b", lse_b))) from None


@_merge_states.register_fake
def _(out_a, lse_a, out_b, lse_b):
    return (torch.empty_like(out_a, memory_format=torch.contiguous_format),
            torch.empty_like(lse_a, memory_format=torch.contiguous_format))


@torch.library.custom_op("mlakit::merge_states_", mutates_args=("out_a", "lse_a"))
def _merge_states_(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> None:
    _merge_into(out_a, lse_a, out_b, lse_b, out_a, lse_a)


@_merge_states_.register_fake
def _(out_a, lse_a, out_b, lse_b):
    return None


@torch.library.custom_op("mlakit::merge_attn_states", mutates_args=("output", "output_lse"))
def _merge_attn_states(output: Tensor, prefix_output: Tensor, prefix_lse: Tensor, suffix_output: Tensor,
                       suffix_lse: Tensor, output_lse: Optional[Tensor]) -> None:
    _merge_ht(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse)


def _merge_ht(output: Tensor, prefix_output: Tensor, prefix_lse: Tensor, suffix_output: Tensor,
              suffix_lse: Tensor, output_lse: Optional[Tensor]) -> None:
    # [H, T] LSE tensors reach merge_states as [T, H] views (strides (1, T)): no copies.
    try:
        _mlakit._C.merge_states(prefix_output, prefix_lse.T, suffix_output, suffix_lse.T, output,
                                None if output_lse is None else output_lse.T, None)
    except (TypeError, ValueError) as e:  # told with this function's names and [H, T] layout
        raise _mlakit._merge_error(e, prefix_output, (("prefix_lse", prefix_lse), ("suffix_lse", suffix_lse),
                                                      ("output_lse", output_lse)),
                                   head_major=True, names=_MERGE_ATTN_NAMES) from None


_MERGE_ATTN_NAMES = {"out_a": "prefix_output", "lse_a": "prefix_lse", "out_b": "suffix_output",
                     "lse_b": "suffix_lse", "out": "output", "lse_out": "output_lse"}


@_merge_attn_states.register_fake
def _(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse):
    return None


# -- MLA step --------------------------------------------------------------------------------

@torch.library.custom_op("mlakit::mla_step_out", mutates_args=("kv_cache", "out", "lse"))
def _mla_step_out(q: Tensor, kv_c: Tensor, k_pe: Tensor, kv_b_proj: Tensor, kv_cache: Tensor,
                  out: Tensor, lse: Optional[Tensor], handle: int, k_scale: Optional[Tensor] = None,
                  indices: Optional[Tensor] = None, topk_length: Optional[Tensor] = None) -> None:
    step = _mlakit._lookup(handle)
    step._impl.run(q, kv_c, k_pe, kv_b_proj, kv_cache, out, lse, None, k_scale, indices, topk_length)


@_mla_step_out.register_fake
def _(q, kv_c, k_pe, kv_b_proj, kv_cache, out, lse, handle, k_scale=None, indices=None, topk_length=None):
    return None


def mla_step_out(step: "_mlakit.MlaStep", q: Tensor, kv_c: Tensor, k_pe: Tensor, kv_b_proj: Tensor,
                 kv_cache: Tensor, out: Tensor, lse: Optional[Tensor] = None, k_scale: Optional[Tensor] = None,
                 indices: Optional[Tensor] = None, topk_length: Optional[Tensor] = None) -> None:
    """One layer of ``step``'s current plan through the custom op. **Mutates ``kv_cache``** (the
    new tokens' latents), ``out`` and ``lse``. ``k_scale``: the layer's cache scale of an
    ``"fp8"`` cache; ``indices`` / ``topk_length``: the layer's indexer output of a sparse plan
    (DeepSeek-V3.2; ``MlaStep.run``)."""
    torch.ops.mlakit.mla_step_out(q, kv_c, k_pe, kv_b_proj, kv_cache, out, lse, step.handle, k_scale, indices,
                                  topk_length)


# -- latent attention ------------------------------------------------------------------------

def _latent_run(plan: "_mlakit.LatentAttention", q: Tensor, kv_cache: Tensor, out: Tensor, lse: Optional[Tensor],
                max_logits: Optional[Tensor], q_pe: Optional[Tensor], indices: Optional[Tensor],
                topk_length: Optional[Tensor], attn_sink: Optional[Tensor], k_scale: Optional[Tensor],
                lse_head_major: bool = False) -> None:
    plan._impl.run(q, q_pe, kv_cache, indices, topk_length, attn_sink, k_scale, out, lse, max_logits, lse_head_major,
                   None)


def _latent_out(q: Tensor, handle: int) -> Tensor:
    """out [T, H, kv_lora_rank] in q's dtype (q is [T, H, L + R], or q_nope [T, H, L])."""
    return q.new_empty(q.shape[0], q.shape[1], _mlakit._lookup(handle).kv_lora_rank)


@torch.library.custom_op("mlakit::latent_attention_out", mutates_args=("out", "lse", "max_logits"))
def _latent_attention_out(q: Tensor, kv_cache: Tensor, out: Tensor, lse: Optional[Tensor],
                          max_logits: Optional[Tensor], handle: int, q_pe: Optional[Tensor] = None,
                          indices: Optional[Tensor] = None, topk_length: Optional[Tensor] = None,
                          attn_sink: Optional[Tensor] = None, k_scale: Optional[Tensor] = None) -> None:
    _latent_run(_mlakit._lookup(handle), q, kv_cache, out, lse, max_logits, q_pe, indices, topk_length, attn_sink,
                k_scale)


@_latent_attention_out.register_fake
def _(q, kv_cache, out, lse, max_logits, handle, q_pe=None, indices=None, topk_length=None, attn_sink=None,
      k_scale=None):
    return None


@torch.library.custom_op("mlakit::latent_attention", mutates_args=())
def _latent_attention(q: Tensor, kv_cache: Tensor, handle: int, q_pe: Optional[Tensor] = None,
                      indices: Optional[Tensor] = None, topk_length: Optional[Tensor] = None,
                      attn_sink: Optional[Tensor] = None, k_scale: Optional[Tensor] = None) -> Tensor:
    out = _latent_out(q, handle)
    _latent_run(_mlakit._lookup(handle), q, kv_cache, out, None, None, q_pe, indices, topk_length, attn_sink, k_scale)
    return out


@_latent_attention.register_fake
def _(q, kv_cache, handle, q_pe=None, indices=None, topk_length=None, attn_sink=None, k_scale=None):
    return _latent_out(q, handle)


@torch.library.custom_op("mlakit::latent_attention_with_lse", mutates_args=())
def _latent_attention_with_lse(q: Tensor, kv_cache: Tensor, handle: int, q_pe: Optional[Tensor] = None,
                               indices: Optional[Tensor] = None, topk_length: Optional[Tensor] = None,
                               attn_sink: Optional[Tensor] = None, lse_head_major: bool = False,
                               k_scale: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    return _latent_with_lse(_mlakit._lookup(handle), q, kv_cache, q_pe, indices, topk_length, attn_sink,
                            lse_head_major, k_scale)


def _latent_with_lse(plan, q, kv_cache, q_pe, indices, topk_length, attn_sink, lse_head_major, k_scale=None):
    out = _latent_out(q, plan.handle)
    lse = q.new_empty(*_lse_shape(q, lse_head_major), dtype=torch.float32)
    _latent_run(plan, q, kv_cache, out, lse, None, q_pe, indices, topk_length, attn_sink, k_scale, lse_head_major)
    return out, lse


@_latent_attention_with_lse.register_fake
def _(q, kv_cache, handle, q_pe=None, indices=None, topk_length=None, attn_sink=None, lse_head_major=False,
      k_scale=None):
    return _latent_out(q, handle), q.new_empty(_lse_shape(q, lse_head_major), dtype=torch.float32)


def latent_attention(plan: "_mlakit.LatentAttention", q: Tensor, kv_cache: Tensor, *, q_pe: Optional[Tensor] = None,
                     indices: Optional[Tensor] = None, topk_length: Optional[Tensor] = None,
                     attn_sink: Optional[Tensor] = None, k_scale: Optional[Tensor] = None, return_lse: bool = False,
                     lse_layout: str = "th"):
    """One layer of ``plan``'s current plan (functional; the custom op under ``torch.compile``):
    ``out [T, H, kv_lora_rank]``, or ``(out, lse)`` when ``return_lse`` (``lse [T, H]``, or
    ``[H, T]`` with ``lse_layout="ht"``). Arguments as :meth:`mlakit.LatentAttention.run`. The
    rows of ``out`` past the plan's tokens are left uninitialized."""
    if return_lse:
        _mlakit._check_lse_layout(lse_layout)
        if _direct(q, kv_cache, q):
            return _latent_with_lse(plan, q, kv_cache, q_pe, indices, topk_length, attn_sink, lse_layout == "ht",
                                    k_scale)
        return torch.ops.mlakit.latent_attention_with_lse(q, kv_cache, plan.handle, q_pe, indices, topk_length,
                                                          attn_sink, lse_layout == "ht", k_scale)
    if _direct(q, kv_cache, q):
        out = _latent_out(q, plan.handle)
        _latent_run(plan, q, kv_cache, out, None, None, q_pe, indices, topk_length, attn_sink, k_scale)
        return out
    return torch.ops.mlakit.latent_attention(q, kv_cache, plan.handle, q_pe, indices, topk_length, attn_sink, k_scale)


def latent_attention_out(plan: "_mlakit.LatentAttention", q: Tensor, kv_cache: Tensor, out: Tensor,
                         lse: Optional[Tensor] = None, *, max_logits: Optional[Tensor] = None,
                         q_pe: Optional[Tensor] = None, indices: Optional[Tensor] = None,
                         topk_length: Optional[Tensor] = None, attn_sink: Optional[Tensor] = None,
                         k_scale: Optional[Tensor] = None) -> None:
    """One layer into preallocated ``out`` (and ``lse``, ``max_logits`` ``[T, H]`` views, if given):
    **mutates them**; for CUDA graphs whose replays change the plan, as :func:`ragged_prefill_out`."""
    if _direct(q, kv_cache, q):
        _latent_run(plan, q, kv_cache, out, lse, max_logits, q_pe, indices, topk_length, attn_sink, k_scale)
    else:
        torch.ops.mlakit.latent_attention_out(q, kv_cache, out, lse, max_logits, plan.handle, q_pe, indices,
                                              topk_length, attn_sink, k_scale)


# -- Python-facing helpers ---------------------------------------------------------------------

def ragged_prefill(plan: RaggedPrefill, q: Tensor, k: Tensor, v: Tensor,
                   return_lse: bool = False, lse_layout: str = "th", *, q_descale: Optional[Tensor] = None,
                   k_descale: Optional[Tensor] = None, v_descale: Optional[Tensor] = None):
    """Attention for ``plan``'s current batch (functional: returns new tensors; the custom op
    under ``torch.compile``). Returns ``out``, or ``(out, lse)`` when ``return_lse``; ``lse`` is ``[T, H]``, or
    ``[H, T]`` with ``lse_layout="ht"``. FP8 inputs: ``out`` in the plan's ``out_dtype``, optional
    ``*_descale`` factors (float32 ``[>= batch, Hkv]``)."""
    descaled = q_descale is not None or k_descale is not None or v_descale is not None
    if return_lse:
        _mlakit._check_lse_layout(lse_layout)
        if _direct(q, k, v):
            return _prefill_with_lse(plan, q, k, v, lse_layout == "ht", q_descale, k_descale, v_descale)
        return torch.ops.mlakit.ragged_prefill_with_lse(q, k, v, plan.handle, lse_layout == "ht", q_descale,
                                                        k_descale, v_descale)
    if _direct(q, k, v):
        if descaled or q.dtype is _FP8:
            out = _new_out(q, v, plan.handle)
            _prefill(plan, q, k, v, out, None, q_descale, k_descale, v_descale)
            return out
        out = q.new_empty(*_out_shape(q, v))  # sizes as arguments: PyTorch parses a tuple ~0.8 µs slower
        plan._impl.run(q, k, v, out, None, None)
        return out
    if descaled:
        return torch.ops.mlakit.ragged_prefill(q, k, v, plan.handle, q_descale, k_descale, v_descale)
    return torch.ops.mlakit.ragged_prefill(q, k, v, plan.handle)


def ragged_prefill_out(plan: RaggedPrefill, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                       lse: Optional[Tensor] = None, *, q_descale: Optional[Tensor] = None,
                       k_descale: Optional[Tensor] = None, v_descale: Optional[Tensor] = None) -> None:
    """Attention into preallocated ``out`` (and ``lse``, if given). Mutates ``out`` and ``lse``.
    FP8 inputs take optional ``*_descale`` factors (float32 ``[>= batch, Hkv]``)."""
    if _direct(q, k, v):
        _prefill(plan, q, k, v, out, lse, q_descale, k_descale, v_descale)
    elif q_descale is None and k_descale is None and v_descale is None:
        torch.ops.mlakit.ragged_prefill_out(q, k, v, out, lse, plan.handle)
    else:
        torch.ops.mlakit.ragged_prefill_out(q, k, v, out, lse, plan.handle, q_descale, k_descale, v_descale)


def merge_states(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> Tuple[Tensor, Tensor]:
    """Functional LSE merge of two partial attentions; returns new ``(out, lse)``."""
    if _direct(out_a, out_b, lse_a):
        return _merged(out_a, lse_a, out_b, lse_b)
    return torch.ops.mlakit.merge_states(out_a, lse_a, out_b, lse_b)


def merge_states_(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> None:
    """In-place LSE merge: **mutates ``out_a`` and ``lse_a``** to hold the merged state."""
    if _direct(out_a, out_b, lse_a):
        _merge_into(out_a, lse_a, out_b, lse_b, out_a, lse_a)
    else:
        torch.ops.mlakit.merge_states_(out_a, lse_a, out_b, lse_b)


def merge_attn_states(output: Tensor, prefix_output: Tensor, prefix_lse: Tensor, suffix_output: Tensor,
                      suffix_lse: Tensor, output_lse: Optional[Tensor] = None) -> None:
    """vLLM's ``merge_attn_states``: writes the merge of two partial attentions into
    ``output`` (and ``output_lse``); returns None.

    ``*output [T, H, D]`` (bf16, fp16 or fp32, all one dtype), ``*_lse [H, T]`` float32, heads
    first (FlashAttention's and vLLM's layout; :func:`merge_states` takes ``[T, H]``). A side whose lse is ``-inf`` or ``+inf`` (FlashAttention-2's
    value for a row with no key) is empty: the other side passes through; both empty give
    ``0`` and ``-inf``. On :func:`merge_states` (no copies: the LSE tensors are read through
    transposed views).
    """
    if _direct(output, prefix_output, suffix_output):
        _merge_ht(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse)
    else:
        torch.ops.mlakit.merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse,
                                           output_lse)
