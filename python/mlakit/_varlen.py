"""``flash_attn_varlen_func`` with FlashAttention's signature, on mlakit's plan/run split.

Exported as :func:`mlakit.torch.flash_attn_varlen_func` (see its docstring for the contract).

Two ways in. Outside ``torch.compile`` (and outside any torch dispatch mode, with plain tensors)
the function calls the implementation (:func:`_run`) directly: the ``torch.library`` dispatch of
a Python custom op costs ~15-20 µs per call, more than the rest of the call. Under
``torch.compile``, fake tensors, ``make_fx`` or a dispatch mode it calls one of three custom ops
instead, so the call traces as one node; the ops run the same ``_run``.

Plan cache. One RaggedPrefill per (device, dtype, heads, head dims, masking options and, for
CUDA offsets, the addresses of the ``cu_seqlens_q`` / ``cu_seqlens_k`` tensors). Keying on the
addresses keeps calls that use different offset tensors in one forward pass (MLA's new-token
attention and each context chunk) on separate plans, so none of them re-plans per layer, and
so each captured graph node reads a plan that :func:`varlen_replan` can update before a replay.

How a call knows whether the lengths changed, without synchronizing the device:

* host offsets (CPU ``cu_seqlens``, or the ``cu_seqlens_*_cpu`` host copies engines keep, e.g.
  vLLM's ``query_start_loc_cpu``): their bytes are compared with those of the plan in force
  (a memcmp; values, not tensor identity, because engines write these buffers through NumPy
  views, which PyTorch's version counters do not see);
* CUDA offsets alone, direct path only: if the tensors are views of the same live tensor
  objects as when the plan was made (held by weak reference), at the same address, with the
  same length and stride, and their version counters have not moved, the values are taken as
  unchanged. The version counter moves on every in-place PyTorch op on the tensor or any view
  of it (``copy_``, ``fill_``, ``x[i] = ...``, ``non_blocking`` copies included). It does NOT
  move for writes that bypass PyTorch's autograd bookkeeping: kernels launched on the raw
  pointer (Triton, other extensions' unregistered kernels), DLPack consumers (CuPy, JAX),
  replays of a captured CUDA graph, ``.data`` aliases. Callers writing offsets that way pass
  host copies, call :func:`varlen_replan` after writing, or switch this off with
  :func:`varlen_trust_version`. Otherwise (new tensors, or the counter moved) the offsets are
  read back: one synchronization of the current stream.

The custom-op path never trusts version counters (a compiled graph may reuse a buffer for
other values without bumping them): with CUDA offsets alone it reads them back every call.
"""

from __future__ import annotations

import collections
import ctypes
import weakref
from typing import Any, Optional, Tuple

import torch

import mlakit as _mlakit

Tensor = torch.Tensor

# LRU bound on cached plans; entries used by a captured CUDA graph are never evicted (the graph
# reads their device workspace on every replay).
_MAX_PLANS = 64

_INT_DTYPES = (torch.int32, torch.int64)
# FP8 inputs (FlashAttention-3's): float8_e4m3fn q, k, v with optional descales; the output is bf16.
_FP8 = getattr(torch, "float8_e4m3fn", None)
_INPUT_DTYPES = (torch.bfloat16, torch.float16) + ((_FP8,) if _FP8 is not None else ())
_mlakit._register_torch()  # the extension takes torch tensors as they are from here on
# Raw getters (no torch.cuda.Stream object, no Python shim): a few hundred ns each per call.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_is_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing
_dispatch_modes = torch._C._len_torch_dispatch_stack
_is_compiling = torch.compiler.is_compiling
_string_at = ctypes.string_at
_grad_enabled = torch.is_grad_enabled
_trust_version = [True]


class _Plan:
    __slots__ = ("attn", "run", "capacity", "device", "lengths", "sig", "src", "captured")

    def __init__(self, attn: Any, capacity: Tuple[int, int, int], device: int) -> None:
        self.attn = attn            # mlakit.RaggedPrefill with fixed capacities
        # Its native launch (bound once: with every capacity fixed, attn never replaces _impl).
        self.run = attn._impl.run
        self.capacity = capacity    # (max_batch, max_q_tokens, max_kv_tokens)
        self.device = device        # q.get_device(): -1 for the CPU
        self.lengths: Optional[Tuple[Tuple[int, ...], Tuple[int, ...]]] = None  # plan in force
        self.sig: Any = None        # _host_sig() of the host offsets it was made from
        self.src: Optional[tuple] = None  # _source() of the CUDA offsets it matches (direct path)
        self.captured = False       # used inside a CUDA graph capture


_plans: "collections.OrderedDict[tuple, _Plan]" = collections.OrderedDict()


def varlen_trust_version(enabled: bool) -> bool:
    """Whether a direct (eager) call with CUDA ``cu_seqlens`` and no host copies may skip reading
    the offsets back when the same tensors' version counters have not moved (see the module
    docstring for what that trusts). On by default; returns the previous setting."""
    old = _trust_version[0]
    _trust_version[0] = bool(enabled)
    return old


# -- what a call compares ------------------------------------------------------------------------

def _signature(x: Any) -> Any:
    """Exact identity of host offsets' values, cheap to compare: (dtype, raw bytes) of a
    contiguous 1-D int CPU tensor (one memcmp, ~0.8 µs at any batch; tolist() grows with the
    batch), a tuple for a list or tuple; None when there is none (the caller then reads values)."""
    if isinstance(x, Tensor):
        if x.is_cpu and x.dim() == 1 and x.dtype in _INT_DTYPES and x.is_contiguous():
            return (x.dtype, _string_at(x.data_ptr(), x.nbytes))
        return None
    if isinstance(x, (list, tuple)):
        return tuple(x)
    return None


# The values of two host offset tensors as one bytes object (element sizes, lengths, bytes), or
# None when either is not a contiguous 1-D int32/int64 CPU tensor: one call, ~0.4 µs a tensor
# (the Python _signature: ~0.8).
_offsets_key = _mlakit._C._host_offsets_key


def _host_sig(host_q: Any, host_k: Any) -> Any:
    """What the plan check compares for host offsets: equal signatures = equal dtypes and values
    (bytes, not tensor identity: engines write these buffers through NumPy views, which the
    version counters do not see). None when there is nothing cheap to compare (the caller then
    reads the values)."""
    sig = _offsets_key(host_q, host_k)
    if sig is not None:
        return sig
    sq = _signature(host_q)
    sk = sq if host_k is host_q else _signature(host_k)  # self-attention: one offsets tensor
    return None if sq is None or sk is None else (sq, sk)


def _root(t: Tensor) -> Tensor:
    base = t._base
    return t if base is None else base


def _source(cu_q: Tensor, cu_k: Tensor) -> tuple:
    """What identifies CUDA offsets' contents for the version-counter rule, per tensor: the
    tensor object and the tensor it is a view of (weakly held: a freed tensor never matches, even
    if its address is reused; the object itself is the cheap test, its base lets a new view of
    the same tensor match), the version counter (shared by a tensor and all its views), shape
    and strides (the address is in the plan key)."""
    return (weakref.ref(cu_q), weakref.ref(_root(cu_q)), cu_q._version, cu_q.shape, cu_q.stride(),
            weakref.ref(cu_k), weakref.ref(_root(cu_k)), cu_k._version, cu_k.shape, cu_k.stride())


# Whether CUDA offsets match _source() of a plan's, per tensor: the recorded object, or else
# its base is the recorded one; the same version counter, shape and strides (the extension
# reads them, ~0.5 µs less than in Python).
_same_source = _mlakit._C._same_source


def _check_offsets(t: Tensor, name: str) -> None:
    if not (t.is_cpu or t.is_cuda):
        raise TypeError(f"mlakit: {name}: is on device '{t.device}'; mlakit runs on cpu and cuda tensors")
    if t.dim() != 1:
        raise ValueError(f"mlakit: {name}: must be 1-D (batch_size + 1 offsets), got shape {list(t.shape)}")
    if t.dtype not in _INT_DTYPES:
        raise TypeError(f"mlakit: {name}: must be int32 or int64, got {t.dtype}")


def _host_values(t: Tensor, name: str) -> Tuple[int, ...]:
    _check_offsets(t, name)
    return tuple(t.tolist())  # a CUDA tensor is copied back here (waits for its stream)


_staging: dict = {}  # (device, dtype, slot) -> pinned host tensor for _read_back


def _read_back(cu_q: Tensor, cu_k: Tensor) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """Both CUDA offset tensors' values with one wait: two async copies into pinned buffers on
    the current stream, then one stream synchronization (tolist() per tensor waits twice)."""
    _check_offsets(cu_q, "cu_seqlens_q")
    _check_offsets(cu_k, "cu_seqlens_k")
    dev = cu_q.get_device()
    if cu_k.get_device() != dev:
        return _host_values(cu_q, "cu_seqlens_q"), _host_values(cu_k, "cu_seqlens_k")
    hosts = []
    for slot, t in enumerate((cu_q, cu_k)):
        n = t.shape[0]
        buf = _staging.get((dev, t.dtype, slot))
        if buf is None or buf.shape[0] < n:
            buf = torch.empty(max(n, 64), dtype=t.dtype, pin_memory=True)
            _staging[(dev, t.dtype, slot)] = buf
        h = buf[:n]
        h.copy_(t, non_blocking=True)
        hosts.append(h)
    torch.cuda.current_stream(dev).synchronize()
    return tuple(hosts[0].tolist()), tuple(hosts[1].tolist())


# -- planning ------------------------------------------------------------------------------------

def _capacity(q: Tensor, k: Tensor, batch: int, old: Optional[_Plan]) -> Tuple[int, int, int]:
    # Sized by the buffers (capacity-sized buffers give the capacity); an existing plan's
    # capacity is kept when it suffices, so a CUDA graph's plan object is never replaced.
    want = (max(batch, 1), max(q.shape[0], 1), max(k.shape[0], 1))
    if old is not None and all(w <= c for w, c in zip(want, old.capacity)):
        return old.capacity
    if old is None:
        return want
    return tuple(max(w, 2 * c if w > c else c) for w, c in zip(want, old.capacity))  # type: ignore[return-value]


def _insert(key: tuple, p: _Plan) -> None:
    _plans[key] = p
    _plans.move_to_end(key)
    if len(_plans) > _MAX_PLANS:
        for old_key in list(_plans):
            if len(_plans) <= _MAX_PLANS:
                break
            if not _plans[old_key].captured and old_key != key:
                del _plans[old_key]


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, out: Optional[Tensor] = None) -> None:
    """q, k, v (and out) as flash_attn_varlen_func takes them, each problem told in its caller's
    terms (the heads and head dims of q, k and v, not the plan's config fields they fill)."""
    named = (("q", q), ("k", k), ("v", v)) + ((("out", out),) if out is not None else ())
    for name, t in named:
        if not (t.is_cpu or t.is_cuda):
            raise TypeError(f"mlakit: {name}: is on device '{t.device}'; mlakit runs on cpu and cuda tensors")
        if t.dim() != 3:
            raise ValueError(f"mlakit: {name}: must be [tokens, heads, head_dim], got shape {list(t.shape)}")
    if q.dtype not in _INPUT_DTYPES:
        raise TypeError(f"mlakit: q: dtype {q.dtype} is not supported (bfloat16, float16 or float8_e4m3fn)")
    for name, t in named[1:]:
        if name == "out" and q.dtype is _FP8:
            if t.dtype not in (torch.bfloat16, torch.float16):
                raise TypeError(f"mlakit: out: dtype {t.dtype}: float8_e4m3fn inputs write bfloat16 or float16")
        elif t.dtype != q.dtype:
            raise TypeError(f"mlakit: {name}: dtype {t.dtype} differs from q's {q.dtype}")
        if t.device != q.device:
            raise TypeError(f"mlakit: {name}: is on {t.device} but q is on {q.device}")
    heads, kv_heads = q.shape[1], k.shape[1]
    if kv_heads <= 0 or heads <= 0:
        raise ValueError(f"mlakit: {'k' if heads > 0 else 'q'}: has no heads (shape {list((k if heads > 0 else q).shape)})")
    if v.shape[1] != kv_heads:
        raise ValueError(f"mlakit: v: has {v.shape[1]} heads but k has {kv_heads}")
    if heads % kv_heads != 0:
        raise ValueError(f"mlakit: q: has {heads} heads, not a multiple of k's {kv_heads} (grouped-query attention: "
                         "each k/v head serves an equal group of q heads)")
    if q.shape[2] <= 0 or v.shape[2] <= 0:
        raise ValueError(f"mlakit: {'q' if q.shape[2] <= 0 else 'v'}: head dim must be > 0")
    if k.shape[2] != q.shape[2]:
        raise ValueError(f"mlakit: k: head dim {k.shape[2]} differs from q's {q.shape[2]}")
    if out is not None and (out.shape[1] != heads or out.shape[2] != v.shape[2]):
        raise ValueError(f"mlakit: out: shape {list(out.shape)} must be [rows, {heads}, {v.shape[2]}] "
                         "(q's heads, v's head dim)")


# The plan's names (config fields, RaggedPrefill.plan's arguments) in flash_attn_varlen_func's terms,
# for an error the library raises that the checks above did not foresee. {q}/{k}: the offsets'
# names (cu_seqlens_* or the host copies cu_seqlens_*_cpu the lengths came from).
_FA_ARGUMENTS = {
    "qo_indptr": "{q}", "kv_indptr": "{k}", "batch_size": "{q}", "config.max_batch": "{q}",
    "config.num_qo_heads": "q", "config.num_kv_heads": "k", "config.head_dim_qk": "q",
    "config.head_dim_vo": "v", "config.dtype": "q", "config.device": "q", "config.max_q_tokens": "q",
    "config.max_kv_tokens": "k", "config.kernel": "q", "options.sm_scale": "softmax_scale",
    "sm_scale": "softmax_scale", "options.logits_soft_cap": "softcap", "options.window_left": "window_size",
}
_FA_WORDS = (
    ("config.num_qo_heads", "q's heads"), ("config.num_kv_heads", "k's heads"),
    ("config.head_dim_qk", "q's head dim"), ("config.head_dim_vo", "v's head dim"),
    ("config.dtype", "q's dtype"), ("config.max_q_tokens", "the q capacity"),
    ("config.max_kv_tokens", "the k capacity"), ("config.max_batch", "the batch capacity"),
    ("num_qo_heads", "q's heads"), ("num_kv_heads", "k's heads"), ("head_dim_qk", "q's head dim"),
    ("head_dim_vo", "v's head dim"), ("qo_indptr", "{q}"), ("kv_indptr", "{k}"),
    ("options.logits_soft_cap", "softcap"), ("options.sm_scale", "softmax_scale"),
    ("options.window_left", "window_size[0]"),
)


def _in_fa_terms(e: Exception, q: Tensor, k: Tensor, v: Tensor, out: Optional[Tensor], host_q: Any,
                 host_k: Any) -> Exception:
    """The error a plan or launch raised, told with flash_attn_varlen_func's argument names: the
    argument checks' own error if one fails, else the message with the plan's names replaced."""
    try:
        _check_inputs(q, k, v, out)
    except (TypeError, ValueError) as mine:
        return mine
    msg = str(e)
    if not msg.startswith("mlakit: "):
        return e
    names = {"q": "cu_seqlens_q_cpu" if host_q is not None else "cu_seqlens_q",
             "k": "cu_seqlens_k_cpu" if host_k is not None else "cu_seqlens_k"}
    arg, sep, rest = msg[len("mlakit: "):].partition(": ")
    if not sep:
        arg, rest = "", msg[len("mlakit: "):]
    if arg in ("config.head_dim_qk", "config.head_dim_vo"):
        rest = f"head dim {q.shape[2]} (v's {v.shape[2]}): {rest}"
    for old, new in _FA_WORDS:
        rest = rest.replace(old, new.format(**names))
    arg = _FA_ARGUMENTS.get(arg, arg).format(**names)
    return type(e)(f"mlakit: {arg}: {rest}" if arg else f"mlakit: {rest}")


def _lengths(cu_q: Tensor, cu_k: Tensor, host_q: Any, host_k: Any) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
    """The offsets' values: from the host copies where given, else read back (a sync)."""
    if host_q is None and host_k is None and cu_q.is_cuda and cu_k.is_cuda:
        return _read_back(cu_q, cu_k)
    return (_host_values(_as_host(host_q, "cu_seqlens_q_cpu"), "cu_seqlens_q_cpu") if host_q is not None
            else _host_values(cu_q, "cu_seqlens_q"),
            _host_values(_as_host(host_k, "cu_seqlens_k_cpu"), "cu_seqlens_k_cpu") if host_k is not None
            else _host_values(cu_k, "cu_seqlens_k"))


def _replan(key: tuple, plan: Optional[_Plan], q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor, cu_k: Tensor,
            host_q: Any, host_k: Any, sig: Any, trust: bool) -> _Plan:
    """The slow path: read the lengths, check them, make or grow the plan, plan if they changed."""
    _check_inputs(q, k, v)
    lengths = _lengths(cu_q, cu_k, host_q, host_k)
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
        heads, kv_heads = q.shape[1], k.shape[1]
        attn = _mlakit.RaggedPrefill(heads, kv_heads, q.shape[2], v.shape[2], dtype=q.dtype, device=q.device,
                                     max_batch=capacity[0], max_q_tokens=capacity[1], max_kv_tokens=capacity[2])
        plan = _Plan(attn, capacity, key[0])
        _insert(key, plan)
    else:
        _plans.move_to_end(key)
    _set_lengths(plan, key, lengths)
    plan.sig = sig
    plan.src = _source(cu_q, cu_k) if trust and cu_q.is_cuda and cu_k.is_cuda else None
    return plan


def _set_lengths(plan: _Plan, key: tuple, lengths: tuple) -> None:
    if lengths != plan.lengths:
        causal, window_left, scale, softcap = key[6:10]
        plan.attn.plan(lengths[0], lengths[1], causal=causal, sm_scale=scale or None, window_left=window_left,
                       logits_soft_cap=softcap or None, stream=_stream_of(plan.device))
        plan.lengths = lengths


def _stream_of(device: int) -> int:
    if device < 0:
        return 0
    return _raw_stream(device) if _raw_stream is not None else torch.cuda.current_stream(device).cuda_stream


# -- one call ------------------------------------------------------------------------------------

def _run(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, cu_seqlens_q_cpu: Any,
         cu_seqlens_k_cpu: Any, softmax_scale: float, causal: bool, window_left: int, softcap: float,
         out: Optional[Tensor], lse: Optional[Tensor], trust: bool = False, descales: Optional[tuple] = None) -> Tensor:
    """Plans if the lengths changed, then launches into out (allocated when None; returned) and
    lse ([H, rows], or None).

    ``cu_seqlens_*_cpu``: host copies (CPU tensors, or lists from the direct path) or None.
    ``trust``: the direct path's call; may skip the read-back by the version-counter rule.
    ``descales``: FP8 inputs' (q_descale, k_descale, v_descale), or None.

    Written for the per-call cost (this runs before every launch): attributes read once, the
    helpers of the plan check inlined, the bookkeeping that need not precede the launch after it."""
    qs, ks, vs = q.shape, k.shape, v.shape
    if len(qs) != 3 or len(ks) != 3 or len(vs) != 3:
        _check_inputs(q, k, v)
    device = q.get_device()
    on_cuda = cu_seqlens_q.is_cuda
    # CUDA offsets (FlashAttention's case, and the only one a graph can replay with new values)
    # are told apart by address; host offsets share one plan per configuration.
    key = (device, q.dtype, qs[1], ks[1], qs[2], vs[2], causal, window_left, softmax_scale, softcap,
           cu_seqlens_q.data_ptr() if on_cuda else None, cu_seqlens_k.data_ptr() if on_cuda else None)
    plan = _plans.get(key)
    # The host offsets, if any: the copies given, else the offsets themselves when on the host.
    host_q = cu_seqlens_q_cpu if cu_seqlens_q_cpu is not None else None if on_cuda else cu_seqlens_q
    host_k = (cu_seqlens_k_cpu if cu_seqlens_k_cpu is not None else
              None if cu_seqlens_k.is_cuda else cu_seqlens_k)
    sig = None
    fresh = False  # the plan in force is for these lengths
    if host_q is not None and host_k is not None:
        sig = _offsets_key(host_q, host_k)  # _host_sig(), its common case inlined
        if sig is None:
            sig = _host_sig(host_q, host_k)
        fresh = plan is not None and sig is not None and sig == plan.sig
    elif plan is not None and trust and host_q is None and host_k is None and _trust_version[0]:
        fresh = _same_source(plan.src, cu_seqlens_q, cu_seqlens_k)
    if fresh:
        out = _launch(plan, q, k, v, out, lse, descales, qs, vs, cu_seqlens_q_cpu, cu_seqlens_k_cpu)
        # After the launch (this host work then overlaps the kernel), what the plan in force
        # needs no check for: inside a CUDA graph capture, mark it (a captured plan is never
        # evicted: the graph reads its device workspace on every replay); else LRU order.
        if device >= 0 and _is_capturing():
            plan.captured = True
        else:
            _plans.move_to_end(key)
        return out
    if device >= 0 and _is_capturing():
        # No plan can be made (nor lengths read back) while a graph is captured: the plan in
        # force is what the captured launch will read, and varlen_replan() updates it.
        if plan is None:
            raise RuntimeError(
                "mlakit: cu_seqlens_q: no plan for these cu_seqlens tensors; call flash_attn_varlen_func once "
                "with them before capturing a CUDA graph (a plan cannot be made during capture)")
        if host_q is not None and host_k is not None:
            lengths = (_host_values(_as_host(host_q, "cu_seqlens_q_cpu"), "cu_seqlens_q_cpu"),
                       _host_values(_as_host(host_k, "cu_seqlens_k_cpu"), "cu_seqlens_k_cpu"))
            if lengths != plan.lengths:
                raise RuntimeError(
                    "mlakit: cu_seqlens_q: the lengths differ from the plan in force and a plan cannot be made "
                    "during CUDA graph capture; run once with these lengths (or call "
                    "mlakit.torch.varlen_replan) before capturing")
        plan.captured = True
    else:
        try:
            plan = _replan(key, plan, q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu,
                           sig, trust)
        except (TypeError, ValueError) as e:
            raise _in_fa_terms(e, q, k, v, out, cu_seqlens_q_cpu, cu_seqlens_k_cpu) from None
    return _launch(plan, q, k, v, out, lse, descales, qs, vs, cu_seqlens_q_cpu, cu_seqlens_k_cpu)


def _launch(plan, q, k, v, out, lse, descales, qs, vs, host_q, host_k):
    """Runs the plan in force into out (allocated when None) and returns out. The extension reads
    the tensors itself (dtypes it does not take go through DLPack, whose error names the
    argument) and launches on PyTorch's current stream of q's device; lse is [H, rows]
    (FlashAttention's layout), which the extension reads transposed. Errors are told in the
    caller's terms."""
    if out is None:
        out = q.new_empty(qs[0], qs[1], vs[2]) if q.dtype is not _FP8 else _fp8_out(q, vs[2])
    try:
        if descales is None:
            plan.run(q, k, v, out, lse, None, lse is not None)
        else:
            plan.run(q, k, v, out, lse, None, lse is not None, *descales)
    except (TypeError, ValueError) as e:  # a try costs nothing until it raises
        raise _in_fa_terms(e, q, k, v, out, host_q, host_k) from None
    return out


def _fp8_out(q: Tensor, dv: int) -> Tensor:
    """The output of FP8 inputs: bf16, as FlashAttention-3's."""
    return q.new_empty(q.shape[0], q.shape[1], dv, dtype=torch.bfloat16)


def _run_op(descales: Optional[tuple], *args: Any) -> Tensor:
    """_run from a custom op, with the FP8 descales when there are any."""
    return _run(*args) if descales is None else _run(*args, descales=descales)


def _descales(q_descale: Optional[Tensor], k_descale: Optional[Tensor], v_descale: Optional[Tensor]) -> Optional[tuple]:
    if q_descale is None and k_descale is None and v_descale is None:
        return None
    return (q_descale, k_descale, v_descale)


def varlen_replan(cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, cu_seqlens_q_cpu: Any = None,
                  cu_seqlens_k_cpu: Any = None) -> int:
    """Re-plans every cached plan that serves these ``cu_seqlens`` tensors (matched by address)
    for the lengths in the host copies, and returns how many it re-planned. Without host copies
    the CUDA offsets are read back (one synchronization): a way to force a re-read after writing
    them behind PyTorch's back (see :func:`varlen_trust_version`).

    For CUDA graphs: a graph replays the launches it captured, which read their plan from the
    device; call this (outside the capture, on the stream the graph is launched on) after
    writing the new lengths into the static ``cu_seqlens`` buffers and before replaying.
    """
    if (cu_seqlens_q_cpu is None) != (cu_seqlens_k_cpu is None):
        raise ValueError("mlakit: cu_seqlens_q_cpu: give both host copies or neither")
    lengths = _lengths(cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu)
    sig = _host_sig(cu_seqlens_q_cpu, cu_seqlens_k_cpu) if cu_seqlens_q_cpu is not None else None
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
        _set_lengths(plan, key, lengths)
        plan.sig = sig
        # The caller wrote these offsets and says what they hold: direct calls with the same
        # tensors may use the plan until their version counters move.
        plan.src = _source(cu_seqlens_q, cu_seqlens_k) if cu_seqlens_q.is_cuda and cu_seqlens_k.is_cuda else None
        n += 1
    return n


def _as_host(x: Any, name: str) -> Tensor:
    if isinstance(x, Tensor):
        if not x.is_cpu:
            raise TypeError(f"mlakit: {name}: must be a host (CPU) tensor or a list of ints, got one on {x.device}")
        return x
    return torch.tensor(list(x), dtype=torch.int32)


# -- custom ops (the torch.compile / tracing path) -------------------------------------------------

@torch.library.custom_op("mlakit::flash_attn_varlen_out", mutates_args=("out", "lse"))
def _varlen_out(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                cu_seqlens_q_cpu: Optional[Tensor], cu_seqlens_k_cpu: Optional[Tensor], softmax_scale: float,
                causal: bool, window_left: int, softcap: float, out: Tensor, lse: Optional[Tensor],
                q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
                v_descale: Optional[Tensor] = None) -> None:
    _run_op(_descales(q_descale, k_descale, v_descale), q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu,
            cu_seqlens_k_cpu, softmax_scale, causal, window_left, softcap, out, lse)


@_varlen_out.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu, softmax_scale, causal,
      window_left, softcap, out, lse, q_descale=None, k_descale=None, v_descale=None):
    return None


# new_empty(*sizes), not new_empty((sizes)): PyTorch parses a tuple of sizes ~0.8 µs slower.
def _out_like(q: Tensor, v: Tensor) -> Tensor:
    qs = q.shape
    if q.dtype is _FP8:
        return _fp8_out(q, v.shape[2])
    return q.new_empty(qs[0], qs[1], v.shape[2])


def _lse_like(q: Tensor) -> Tensor:
    qs = q.shape
    return q.new_empty(qs[1], qs[0], dtype=torch.float32)


@torch.library.custom_op("mlakit::flash_attn_varlen", mutates_args=())
def _varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
            cu_seqlens_q_cpu: Optional[Tensor], cu_seqlens_k_cpu: Optional[Tensor], softmax_scale: float,
            causal: bool, window_left: int, softcap: float, q_descale: Optional[Tensor] = None,
            k_descale: Optional[Tensor] = None, v_descale: Optional[Tensor] = None) -> Tensor:
    return _run_op(_descales(q_descale, k_descale, v_descale), q, k, v, cu_seqlens_q, cu_seqlens_k,
                   cu_seqlens_q_cpu, cu_seqlens_k_cpu, softmax_scale, causal, window_left, softcap, None, None)


@_varlen.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu, softmax_scale, causal,
      window_left, softcap, q_descale=None, k_descale=None, v_descale=None):
    return _out_like(q, v)


@torch.library.custom_op("mlakit::flash_attn_varlen_with_lse", mutates_args=())
def _varlen_with_lse(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                     cu_seqlens_q_cpu: Optional[Tensor], cu_seqlens_k_cpu: Optional[Tensor],
                     softmax_scale: float, causal: bool, window_left: int,
                     softcap: float, q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
                     v_descale: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    out, lse = _out_like(q, v), _lse_like(q)
    _run_op(_descales(q_descale, k_descale, v_descale), q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu,
            cu_seqlens_k_cpu, softmax_scale, causal, window_left, softcap, out, lse)
    return out, lse


@_varlen_with_lse.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu, softmax_scale, causal,
      window_left, softcap, q_descale=None, k_descale=None, v_descale=None):
    return _out_like(q, v), _lse_like(q)


def _direct(q: Any, k: Any, v: Any) -> bool:
    """Whether a call may skip the custom-op dispatch: eager, no torch dispatch mode (fake
    tensors, make_fx, FlopCounterMode...) on the stack, and plain tensors (not subclasses).
    is_compiling() comes first: under dynamo it is a constant and the rest is not traced."""
    return (not _is_compiling() and not _dispatch_modes() and type(q) is Tensor and type(k) is Tensor
            and type(v) is Tensor)


# -- the FlashAttention-compatible entry point ---------------------------------------------------

def _unsupported(name: str, why: str) -> ValueError:
    return ValueError(f"mlakit: {name}: {why} (not supported by mlakit.torch.flash_attn_varlen_func)")


def _window(window_size: Any, causal: bool, max_seqlen_k: Any) -> Tuple[int, bool]:
    """FlashAttention's (left, right) window -> (window_left, causal). A negative side means
    unlimited; right == 0 is the causal diagonal; a right window at or past ``max_seqlen_k``
    reaches past every key, and flash-attn 2 sets it to -1 (unlimited): so does this. A right
    window in (0, max_seqlen_k) has no mlakit equivalent. (A left window needs no such rule: one
    at or past every key masks nothing in mlakit either.)"""
    if window_size is None:
        return -1, causal
    try:
        left, right = (int(x) for x in window_size)
    except (TypeError, ValueError):
        raise ValueError(f"mlakit: window_size: must be a (left, right) pair of ints, got {window_size!r}") from None
    if right > 0 and not causal:
        try:
            longest = int(max_seqlen_k)
        except (TypeError, ValueError):
            raise ValueError(f"mlakit: max_seqlen_k: must be an int (a right window is compared with it), got "
                             f"{max_seqlen_k!r}") from None
        if right < longest:
            raise _unsupported("window_size", f"a right window (window_size[1] = {right} > 0, below max_seqlen_k = "
                                              f"{longest})")
        right = -1
    return (left if left >= 0 else -1), (causal or right == 0)


def flash_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                           max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           window_size: Any = (-1, -1), softcap: float = 0.0, alibi_slopes: Any = None,
                           deterministic: bool = False, return_attn_probs: bool = False,
                           block_table: Any = None, *, return_softmax_lse: bool = False,
                           out: Optional[Tensor] = None, cu_seqlens_q_cpu: Any = None,
                           cu_seqlens_k_cpu: Any = None, q_descale: Optional[Tensor] = None,
                           k_descale: Optional[Tensor] = None, v_descale: Optional[Tensor] = None) -> Any:
    """FlashAttention's ``flash_attn_varlen_func`` on mlakit (forward only).

    Arguments and results as in flash-attn 2 (and vLLM's fork): ``q [total_q, H, Dqk]``,
    ``k [total_k, Hkv, Dqk]``, ``v [total_k, Hkv, Dv]`` (``H`` a multiple of ``Hkv``; ``Dv``
    may differ from ``Dqk``, e.g. MLA's 192/128: no padding of V), ``cu_seqlens_*`` int32 offsets
    (``batch + 1``, on the device or the host). Tensors may hold more rows than
    ``cu_seqlens_*[-1]`` (capacity-sized buffers): rows past the batch are neither read nor
    written (``out`` rows there are left as they were, as in flash-attn: uninitialized when
    ``out`` is allocated here). ``softmax_scale`` (default ``1/sqrt(Dqk)``; DeepSeek's YaRN
    checkpoints need :func:`mlakit.deepseek_softmax_scale`), ``causal`` (bottom-right aligned),
    ``window_size=(left, right)``, ``softcap``. ``right`` must be ``-1``, ``0`` (= causal) or, as
    flash-attn 2 reads it, ``>= max_seqlen_k`` (no right limit); ``max_seqlen_k`` is read for
    that only, ``max_seqlen_q`` and ``deterministic`` are accepted and not needed (mlakit is
    deterministic). For MLA with the RoPE part in q and k (``Dqk = nope + rope``): q's and k's
    RoPE columns must share one pair layout (interleaved or rotate-half).

    Returns ``out [total_q, H, Dv]``; with ``return_softmax_lse=True`` ``(out, softmax_lse)``,
    ``softmax_lse [H, total_q]`` float32 (natural log; ``-inf`` for a row with no key, where
    FlashAttention-2 writes ``+inf``); with ``return_attn_probs=True`` ``(out, softmax_lse,
    S_dmask)`` with ``S_dmask`` an empty tensor of q's dtype, as flash-attn 2 returns it without
    dropout. ``out=`` writes into a preallocated tensor.

    FP8 (FlashAttention-3's arguments): ``float8_e4m3fn`` q, k, v with optional float32
    ``q_descale`` / ``k_descale`` / ``v_descale`` ``[batch, Hkv]`` (entry ``[b, h]`` multiplies
    sequence ``b``'s kv head ``h``; ``None`` = 1); ``out`` is bf16.

    Forward only: while grad is enabled, an input that requires grad is refused (RuntimeError)
    rather than given an output without a graph (its gradients would be lost silently); call it
    under ``torch.no_grad()`` / ``torch.inference_mode()``, as engines do.

    Not supported (ValueError): ``dropout_p > 0``, ``alibi_slopes``, a right window shorter
    than ``max_seqlen_k``, ``block_table`` (paged KV). Errors name this function's arguments
    (``cu_seqlens_q``, the heads of ``q`` and ``k``, ...).

    Planning: a plan is made only when the lengths change. ``cu_seqlens_q_cpu`` /
    ``cu_seqlens_k_cpu`` (host copies of the offsets; CPU tensors or lists) let a call with CUDA
    ``cu_seqlens`` decide that on the host (their bytes against the plan's). Without them, an
    eager call with the same CUDA offset tensors as the plan's, not modified through PyTorch
    since (version counters), reuses the plan; otherwise the offsets are read back (one
    synchronization). Details and what that trusts: ``mlakit._varlen``'s docstring,
    :func:`varlen_trust_version`. Eager calls skip the custom-op dispatch; under
    ``torch.compile`` the call is one custom op. Under CUDA graphs: call once outside the
    capture with the same (static) tensors, capture, then before each replay write the new
    offsets and call :func:`mlakit.torch.varlen_replan`.
    """
    if dropout_p and dropout_p > 0.0:
        raise _unsupported("dropout_p", f"dropout ({dropout_p})")
    if alibi_slopes is not None:
        raise _unsupported("alibi_slopes", "ALiBi")
    if block_table is not None:
        raise _unsupported("block_table", "a paged KV cache")
    # (Infinite values pass these and are refused, in these names, when the plan is made.)
    if softcap is None or softcap < 0.0:
        raise ValueError(f"mlakit: softcap: must be >= 0 (0 = off), got {softcap}")
    if softmax_scale is not None and not softmax_scale > 0.0:
        raise ValueError(f"mlakit: softmax_scale: must be > 0 or None, got {softmax_scale}")
    if window_size == (-1, -1):  # the default, without _window's conversions
        window_left, causal = -1, bool(causal)
    else:
        window_left, causal = _window(window_size, bool(causal), max_seqlen_k)
    # Forward only: an output without a graph would drop the gradients silently. (Grad mode
    # first: engines run with it off, and then no tensor attribute is read.)
    if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        name = "q" if q.requires_grad else "k" if k.requires_grad else "v"
        raise RuntimeError(
            f"mlakit: {name}: requires grad while grad is enabled, and mlakit.torch.flash_attn_varlen_func is "
            "forward-only (no backward: its output would carry no graph); call it under torch.no_grad() or "
            "torch.inference_mode(), or pass detached inputs")
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    want_lse = return_softmax_lse or return_attn_probs
    # _direct(), inlined (this runs before every launch), and out a plain tensor too.
    if (not _is_compiling() and not _dispatch_modes() and type(q) is Tensor and type(k) is Tensor
            and type(v) is Tensor and (out is None or type(out) is Tensor)):
        # Host copies on a CUDA device are refused by _run's plan check (no signature: never
        # taken as unchanged; reading their values raises, naming cu_seqlens_q_cpu).
        lse = _lse_like(q) if want_lse else None
        if q_descale is None and k_descale is None and v_descale is None:
            out = _run(q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu, scale, causal,
                       window_left, float(softcap), out, lse, trust=True)
        else:
            out = _run(q, k, v, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q_cpu, cu_seqlens_k_cpu, scale, causal,
                       window_left, float(softcap), out, lse, trust=True, descales=(q_descale, k_descale, v_descale))
    else:
        host_q = None if cu_seqlens_q_cpu is None else _as_host(cu_seqlens_q_cpu, "cu_seqlens_q_cpu")
        host_k = None if cu_seqlens_k_cpu is None else _as_host(cu_seqlens_k_cpu, "cu_seqlens_k_cpu")
        args = (q, k, v, cu_seqlens_q, cu_seqlens_k, host_q, host_k, scale, causal, window_left, float(softcap))
        d = (() if q_descale is None and k_descale is None and v_descale is None
             else (q_descale, k_descale, v_descale))
        if out is not None:
            lse = _lse_like(q) if want_lse else None
            torch.ops.mlakit.flash_attn_varlen_out(*args, out, lse, *d)
        elif want_lse:
            out, lse = torch.ops.mlakit.flash_attn_varlen_with_lse(*args, *d)
        else:
            out, lse = torch.ops.mlakit.flash_attn_varlen(*args, *d), None
    if return_attn_probs:
        # flash-attn 2 returns S_dmask only with dropout; without, an empty tensor of q's dtype.
        return out, lse, q.new_empty(0)
    if return_softmax_lse:
        return out, lse
    return out


__all__ = ["flash_attn_varlen_func", "varlen_replan", "varlen_trust_version"]
