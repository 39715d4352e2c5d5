"""mlakit: attention kernels for DeepSeek MLA prefill.

Ragged (variable-length, batched) prefill attention with a plan/run split, LSE-based merging of
partial attentions, and a float64 reference. Arrays of any library that speaks DLPack (PyTorch,
CuPy, JAX, NumPy) are passed without copies; CPU arrays run on the multi-threaded CPU backend,
CUDA arrays on the CUDA kernels.

    import mlakit
    attn = mlakit.RaggedPrefill(num_qo_heads=16, num_kv_heads=16, head_dim_qk=192,
                                head_dim_vo=128, dtype="bf16", device="cuda",
                                max_batch=64, max_q_tokens=65536, max_kv_tokens=65536)
    attn.plan(qo_indptr, kv_indptr, causal=True)       # host int32 arrays, batch_size + 1 entries
    out, lse = attn.run(q, k, v, return_lse=True)

For ``torch.compile`` and CUDA graphs use the custom ops in :mod:`mlakit.torch`.
Errors raised by the C++ library arrive as ``ValueError`` (bad value or unsupported case),
``TypeError`` (wrong dtype or device) or ``RuntimeError`` (CUDA/system failure) with the C++
message unchanged.
"""

from __future__ import annotations

import itertools
import math
import sys
import weakref
from typing import Any, Optional, Tuple

try:
    from . import _mlakit as _C
except ImportError as _err:
    # Plain CMake build: the extension sits on PYTHONPATH as a top-level `_mlakit`. If that is
    # missing too, report the original failure (e.g. an undefined symbol), not the fallback's.
    try:
        import _mlakit as _C  # type: ignore[no-redef]
    except ModuleNotFoundError:
        raise _err from None

__version__ = "0.1.0"

__all__ = [
    "RaggedPrefill",
    "MlaStep",
    "MlaPlanInfo",
    "LatentAttention",
    "LatentPlanInfo",
    "graph_rows_bucket",
    "StreamGraph",
    "PlanInfo",
    "PrefillOptions",
    "ragged_prefill",
    "merge_states",
    "reference_prefill",
    "reference_merge_states",
    "built_with_cuda",
    "cuda_device_count",
    "cuda_unavailable_reason",
    "device_description",
    "deepseek_softmax_scale",
    "info",
]

PlanInfo = _C.PlanInfo
PrefillOptions = _C.PrefillOptions
built_with_cuda = _C.built_with_cuda
cuda_device_count = _C.cuda_device_count
cuda_unavailable_reason = _C.cuda_unavailable_reason
graph_rows_bucket = _C.graph_rows_bucket


# --------------------------------------------------------------------------------------------
# Array-library helpers. Nothing here imports torch/cupy/numpy eagerly: a library is used only
# when the caller's arrays come from it (it is then already in sys.modules).
# --------------------------------------------------------------------------------------------

def _lib_of(x: Any) -> str:
    mod = type(x).__module__.partition(".")[0]
    if mod in ("jaxlib", "jax"):
        return "jax"
    return mod


def _dtype_name(dtype: Any) -> str:
    """Normalizes a dtype given as a string, NumPy/ml_dtypes dtype or torch.dtype."""
    if isinstance(dtype, str):
        s = dtype.lower()
    elif type(dtype).__module__.startswith("torch"):
        s = str(dtype)[len("torch."):]
    else:
        import numpy as np  # NumPy/ml_dtypes dtypes and scalar types
        s = np.dtype(dtype).name
    aliases = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
               "float": "fp32", "float64": "fp64", "double": "fp64", "float8_e4m3fn": "e4m3",
               "fp8": "e4m3", "fp8_e4m3": "e4m3"}
    return aliases.get(s, s)


def _device_name(device: Any) -> str:
    if device is None:
        return "cpu"
    if isinstance(device, int):
        return f"cuda:{device}"
    s = str(device)
    return s


_TORCH_DTYPE_CODES: Optional[dict] = None  # torch dtype -> mlakit::DType value
# torch.Tensor once registered with the extension (_register_torch): from then on the extension
# takes torch tensors as they are and reads their metadata itself (no descriptor tuple, no DLPack
# export): through PyTorch's DLPack C exchange table where torch has one (2.10+), else through
# the tensor's attributes (python/src/torch_exchange.h).
_TorchTensor: Any = None


def _register_torch() -> Any:
    """Tells the extension about torch (torch.Tensor, its dtypes, the current-stream getter) so
    the launching functions take torch tensors directly and, given ``stream=None``, launch on
    PyTorch's current stream of q's device. Called once torch is in use; returns torch.Tensor."""
    global _TorchTensor
    if _TorchTensor is None:
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is None:  # older torch: the public (slower) getter
            def raw(index: int) -> int:
                return torch.cuda.current_stream(index).cuda_stream
        _C._register_torch(torch.Tensor, (torch.bfloat16, torch.float16, torch.float32, torch.float64,
                                          torch.int32, getattr(torch, "float8_e4m3fn", None), torch.uint8),
                           torch.int64, raw)
        _TorchTensor = torch.Tensor
    return _TorchTensor


def _torch_descriptor(x: Any) -> Optional[tuple]:
    """(data_ptr, dtype code, shape, strides, device type, device index) for a CPU or CUDA
    torch tensor of a dtype mlakit knows; None otherwise (the DLPack path then produces the
    error message). Exporting through DLPack costs several microseconds per tensor, which
    dominated the per-call cost of small prefill launches."""
    global _TORCH_DTYPE_CODES
    if _TORCH_DTYPE_CODES is None:
        torch = sys.modules["torch"]
        _TORCH_DTYPE_CODES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2,
                              torch.float64: 3, torch.int32: 4}
        if hasattr(torch, "float8_e4m3fn"):
            _TORCH_DTYPE_CODES[torch.float8_e4m3fn] = 5
        _TORCH_DTYPE_CODES[torch.uint8] = 6  # raw bytes: the MLA step's FP8 caches
    code = _TORCH_DTYPE_CODES.get(x.dtype)
    if code is None:
        return None
    # is_cuda / is_cpu / get_device() build no torch.device object: x.device and its .type took
    # about half of this function's time.
    if x.is_cuda:
        return (x.data_ptr(), code, x.shape, x.stride(), 1, x.get_device())
    if x.is_cpu:
        return (x.data_ptr(), code, x.shape, x.stride(), 0, 0)
    return None


def _native(x: Any) -> Any:
    """What the extension receives: the array itself (torch tensors included: the extension reads
    their metadata, and detaches one that requires grad before a DLPack export: mlakit is
    forward-only); a reinterpreting wrapper for NumPy bfloat16 arrays (ml_dtypes), which NumPy
    cannot export through DLPack. Kept cheap: it runs for every array of every call."""
    if type(x) is _TorchTensor:
        return x
    mod = type(x).__module__
    if mod.startswith("torch"):  # nn.Parameter, other subclasses; the first torch tensor
        _register_torch()
        return x
    if mod == "numpy" and x.dtype.kind == "V":
        name = x.dtype.name  # .name is slow: only for NumPy's opaque (ml_dtypes) dtypes
        import numpy as np
        if name == "bfloat16":
            return _C._Reinterpreted(x.view(np.uint16), "bf16")
        if name == "float8_e4m3fn":
            return _C._Reinterpreted(x.view(np.uint8), "e4m3")
    return x


def _is_cuda_array(x: Any) -> bool:
    lib = _lib_of(x)
    if lib == "torch":
        return x.is_cuda
    if lib == "cupy":
        return True
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        try:
            return dev()[0] in (2, 13)  # kDLCUDA, kDLCUDAManaged
        except Exception:
            return False
    return False


_TORCH_CUDA_USABLE = None


def _torch_cuda_usable(torch: Any) -> bool:
    """torch.cuda.is_available(), asked once per process."""
    global _TORCH_CUDA_USABLE
    if _TORCH_CUDA_USABLE is None:
        _TORCH_CUDA_USABLE = bool(torch.cuda.is_available())
    return _TORCH_CUDA_USABLE


def _torch_current_stream(device: Any) -> int:
    """PyTorch's current stream on `device` (a CUDA device index, or a torch.device)."""
    torch = sys.modules["torch"]
    # The raw getter skips building a torch.cuda.Stream object (a few microseconds per call).
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        if isinstance(device, int):
            return raw(device)
        if isinstance(device, torch.device) and device.index is not None:
            return raw(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def _stream_handle(stream: Any, like: Any = None, device: Any = None) -> int:
    """The cudaStream_t as an int. Explicit `stream` wins (int, torch.cuda.Stream, cupy Stream);
    otherwise the caller's current stream: PyTorch's for torch CUDA tensors (or a CUDA plan when
    torch is loaded), CuPy's for CuPy arrays; else the default stream (0)."""
    if stream is not None:
        if isinstance(stream, int):
            return stream
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream / cupy.cuda.Stream
            h = getattr(stream, attr, None)
            if isinstance(h, int):
                return h
        raise TypeError(f"mlakit: stream: expected an int, torch.cuda.Stream or cupy Stream, got "
                        f"{type(stream).__qualname__}")
    if like is not None:
        mod = type(like).__module__
        if mod.startswith("torch"):
            return _torch_current_stream(like.get_device()) if like.is_cuda else 0
        if mod.startswith("cupy"):
            return sys.modules["cupy"].cuda.get_current_stream().ptr
        return 0
    if device is not None and str(device).startswith("cuda"):
        torch = sys.modules.get("torch")
        if torch is not None and _torch_cuda_usable(torch):
            # "cuda:N" -> N: the raw getter takes an index (a device string takes torch's slow path,
            # which builds a Stream object: ~10 us per plan() on the H200's host).
            dev = str(device)
            return _torch_current_stream(int(dev[5:]) if len(dev) > 5 else 0)
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            return cupy.cuda.get_current_stream().ptr
    return 0


def _launch_stream(stream: Any, like: Any) -> Any:
    """The stream argument of a launch: None for a plain torch tensor and no explicit stream (the
    extension then takes PyTorch's current stream of its device, cheaper than doing it here);
    else _stream_handle's int."""
    if stream is None and type(like) is _TorchTensor:
        return None
    return _stream_handle(stream, like=like)


def _empty(like: Any, shape: Tuple[int, ...], dtype: Optional[str] = None) -> Any:
    """An uninitialized array from `like`'s library, on its device. dtype None = like's dtype;
    otherwise "float32", "float64", or "bfloat16" / "float16" (the output of e4m3 inputs)."""
    lib = _lib_of(like)
    if lib == "torch":
        torch = sys.modules["torch"]
        if type(like) is _TorchTensor:  # sizes as arguments: PyTorch parses a tuple ~0.8 µs slower
            return like.new_empty(*shape) if dtype is None else like.new_empty(*shape, dtype=getattr(torch, dtype))
        dt = like.dtype if dtype is None else getattr(torch, dtype)
        return torch.empty(shape, dtype=dt, device=like.device)
    if lib == "numpy":
        import numpy as np
        if dtype == "bfloat16":
            import ml_dtypes  # NumPy's bfloat16
            return np.empty(shape, dtype=ml_dtypes.bfloat16)
        return np.empty(shape, dtype=like.dtype if dtype is None else dtype)
    if lib == "cupy":
        cupy = sys.modules["cupy"]
        with like.device:
            return cupy.empty(shape, dtype=like.dtype if dtype is None else dtype)
    if lib == "jax" and not _is_cuda_array(like):
        # JAX arrays are immutable: results are written into NumPy arrays (zero-copy for JAX to
        # consume with jax.numpy.asarray on CPU).
        import numpy as np
        return np.empty(shape, dtype=np.dtype(like.dtype) if dtype is None else dtype)
    raise TypeError(
        f"mlakit: out: cannot allocate an output for a {type(like).__qualname__} on this device; "
        "pass out= (and lse=) explicitly")


def _shape(x: Any, name: str, ndim: int) -> Tuple[int, ...]:
    if type(x) is _TorchTensor:
        shape = x.shape  # a torch.Size: already a tuple of ints
    else:
        shape = getattr(x, "shape", None)
        if shape is None:
            raise TypeError(f"mlakit: {name}: expected an array supporting DLPack or the buffer protocol, "
                            f"got {type(x).__qualname__}")
        shape = tuple(int(s) for s in shape)
    if len(shape) != ndim:
        raise ValueError(f"mlakit: {name}: must have {ndim} dimensions, got shape {list(shape)}")
    return shape


def _options(causal: bool, sm_scale: Optional[float], window_left: Optional[int],
             logits_soft_cap: Optional[float]) -> Any:
    """The keyword options of plan()/ragged_prefill()/reference_prefill() as the one native
    PrefillOptions (whose fields the C++ library checks, naming the field)."""
    if sm_scale is None:
        scale = 0.0  # the C++ default: 1 / sqrt(head_dim_qk)
    else:
        scale = float(sm_scale)
        if not (scale > 0.0 and math.isfinite(scale)):
            raise ValueError(f"mlakit: sm_scale: must be a positive finite number or None "
                             f"(None means 1/sqrt(head_dim_qk)), got {sm_scale}")
    return _C.PrefillOptions(causal=bool(causal), sm_scale=scale,
                             window_left=-1 if window_left is None else int(window_left),
                             logits_soft_cap=0.0 if logits_soft_cap is None else float(logits_soft_cap))


def _lse_arg(lse: Any, layout: str, tokens: int, heads: int) -> Any:
    """The [rows, H] view the extension takes of an lse given in `layout`: "th" ([rows, H],
    the default) as it is, "ht" ([H, rows], FlashAttention's layout) transposed (a view)."""
    if layout == "th" or lse is None:
        return lse
    shape = _shape(lse, "lse", 2)
    if shape[0] != heads:
        raise ValueError(f"mlakit: lse: with lse_layout='ht' it must be [H, rows] = [{heads}, >= {tokens}], "
                         f"got shape {list(shape)}")
    return lse.T


def _out_dtype_arg(impl: Any) -> Optional[str]:
    """_empty's dtype for the output of a native RaggedPrefill: None (q's dtype) for 16-bit
    inputs, the library name of out_dtype for e4m3 inputs."""
    if impl.dtype != "e4m3":
        return None
    return "bfloat16" if impl.out_dtype == "bf16" else "float16"


def _check_lse_layout(layout: str) -> None:
    if layout not in ("th", "ht"):
        raise ValueError(f"mlakit: lse_layout: must be 'th' ([tokens, heads]) or 'ht' ([heads, tokens]), "
                         f"got {layout!r}")


_MERGE_ARGS = ("out_a", "lse_a", "out_b", "lse_b", "lse_out", "out")


def _merge_error(e: Exception, out_a: Any, lses: Tuple[Tuple[str, Any], ...], head_major: bool = False,
                 names: Optional[dict] = None) -> Exception:
    """A merge's error told in the caller's terms: an LSE of the wrong shape with the layout the
    function takes (the common mistake: FlashAttention's [H, N] where [N, H] is taken, or the
    reverse), else the library's message with ``names`` (its argument -> the caller's) applied.
    ``lses``: (caller's name, the array as the caller gave it)."""
    shape = getattr(out_a, "shape", None)
    if isinstance(e, ValueError) and shape is not None and len(shape) == 3:
        n, h = int(shape[0]), int(shape[1])
        want = [h, n] if head_major else [n, h]
        out_name = (names or {}).get("out_a", "out_a")
        for name, lse in lses:
            got = None if lse is None else [int(x) for x in getattr(lse, "shape", ())]
            if got is not None and got != want:
                layout = ("[H, T] (heads first: vLLM's and FlashAttention's layout)" if head_major else
                          "[N, H] (tokens first; an [H, N] array such as FlashAttention's LSE passes as its .T)")
                return ValueError(f"mlakit: {name}: shape {got} must be {layout} = {want}, "
                                  f"for {out_name} of shape {[int(x) for x in shape]}")
    if not names:
        return e
    msg = str(e)
    for old in _MERGE_ARGS:
        new = names.get(old, old)
        if msg.startswith(f"mlakit: {old}: "):
            msg = f"mlakit: {new}: " + msg[len(f"mlakit: {old}: "):]
        elif old != "out":
            msg = msg.replace(f" {old}'s ", f" {new}'s ").replace(f" {old} ", f" {new} ")
    return type(e)(msg)


def _indptr_len_and_last(x: Any) -> Tuple[int, int]:
    """(entries, last value) of an indptr argument, for capacity growth; (0, 0) if unreadable."""
    try:
        n = len(x)
        return n, (int(x[n - 1]) if n else 0)
    except Exception:
        return 0, 0


# --------------------------------------------------------------------------------------------
# RaggedPrefill
# --------------------------------------------------------------------------------------------

_registry: "weakref.WeakValueDictionary[int, RaggedPrefill]" = weakref.WeakValueDictionary()
_handles = itertools.count(1)


def _lookup(handle: int) -> "RaggedPrefill":
    """The RaggedPrefill registered under `handle` (used by the mlakit.torch custom ops)."""
    obj = _registry.get(int(handle))
    if obj is None:
        raise ValueError(f"mlakit: handle: no live RaggedPrefill has handle {handle}")
    return obj


def _grow(current: int, needed: int) -> int:
    return current if needed <= current else max(needed, 2 * current)


class RaggedPrefill:
    """Ragged batched prefill attention with a plan/run split (FlashInfer-wrapper style).

    Shapes: ``q [total_q, H, Dqk]``, ``k [total_kv, Hkv, Dqk]``, ``v [total_kv, Hkv, Dvo]``,
    ``out [total_q, H, Dvo]`` (input dtype), ``lse [total_q, H]`` (float32, natural log).
    ``H`` must be a multiple of ``Hkv`` (grouped-query attention). The last dimension of every
    tensor must be contiguous; other strides are free.

    The constructor fixes the static problem (heads, head dims, dtype, device) and the capacity
    of the workspaces: ``max_batch`` sequences, ``max_q_tokens`` and ``max_kv_tokens`` total
    tokens. A capacity left as ``None`` grows on demand: :meth:`plan` then replaces the native
    object (and its workspaces) when a batch does not fit, which invalidates CUDA graphs that
    captured :meth:`run`. Give all three capacities when capturing graphs.

    ``device`` is where :meth:`run` executes: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, a
    ``torch.device`` or a CUDA device index.

    ``kv_split``: ``"auto"`` (default: the tail rule only), ``"on"`` (also sequences too small
    to fill the GPU) or ``"off"``: whether the Hopper kernel splits q tiles' key ranges
    (``mlakit/prefill.h``, KvSplitMode); outputs stay bitwise batch-invariant either way.

    FP8: ``dtype="e4m3"`` (``torch.float8_e4m3fn`` inputs) writes ``out`` in ``out_dtype``
    (``"bf16"``, the default, or ``"fp16"``; 16-bit inputs write their own dtype and ignore it),
    and :meth:`run` takes FlashAttention-3's ``q_descale`` / ``k_descale`` / ``v_descale``.
    """

    def __init__(self, num_qo_heads: int, num_kv_heads: int, head_dim_qk: int = 192,
                 head_dim_vo: int = 128, *, dtype: Any = "bf16", device: Any = "cpu",
                 max_batch: Optional[int] = None, max_q_tokens: Optional[int] = None,
                 max_kv_tokens: Optional[int] = None, kv_split: str = "auto", out_dtype: Any = "bf16") -> None:
        self._fixed = (max_batch is not None, max_q_tokens is not None, max_kv_tokens is not None)
        device_name = _device_name(device)
        if device_name == "cuda":
            device_name = "cuda:0"
        self._args = dict(num_qo_heads=int(num_qo_heads), num_kv_heads=int(num_kv_heads),
                          head_dim_qk=int(head_dim_qk), head_dim_vo=int(head_dim_vo),
                          dtype=_dtype_name(dtype),
                          max_batch=int(max_batch) if max_batch is not None else 16,
                          max_q_tokens=int(max_q_tokens) if max_q_tokens is not None else 4096,
                          max_kv_tokens=int(max_kv_tokens) if max_kv_tokens is not None else 4096,
                          device=device_name, kv_split=str(kv_split), out_dtype=_dtype_name(out_dtype))
        self._impl = _C.RaggedPrefill(**self._args)
        self.handle: int = next(_handles)
        _registry[self.handle] = self

    # -- static configuration ------------------------------------------------------------
    num_qo_heads = property(lambda self: self._impl.num_qo_heads)
    num_kv_heads = property(lambda self: self._impl.num_kv_heads)
    head_dim_qk = property(lambda self: self._impl.head_dim_qk)
    head_dim_vo = property(lambda self: self._impl.head_dim_vo)
    dtype = property(lambda self: self._impl.dtype, doc='"bf16", "fp16" or "e4m3"')
    out_dtype = property(lambda self: self._impl.out_dtype,
                         doc='the output\'s dtype: the input dtype, or out_dtype for e4m3 inputs')
    device = property(lambda self: self._impl.device, doc='"cpu" or "cuda:N"')
    max_batch = property(lambda self: self._impl.max_batch)
    max_q_tokens = property(lambda self: self._impl.max_q_tokens)
    max_kv_tokens = property(lambda self: self._impl.max_kv_tokens)

    # -- current plan ----------------------------------------------------------------------
    @property
    def planned(self) -> bool:
        return self._impl.planned

    @property
    def info(self) -> PlanInfo:
        """What the last :meth:`plan` decided (tiles, block sizes, visible pairs)."""
        return self._impl.info()

    causal = property(lambda self: self._impl.causal)
    window_left = property(lambda self: self._impl.window_left)
    logits_soft_cap = property(lambda self: self._impl.logits_soft_cap)
    sm_scale = property(lambda self: self._impl.sm_scale,
                        doc="scale of the current plan (0.0 = the default 1/sqrt(head_dim_qk))")

    def _ensure_capacity(self, qo_indptr: Any, kv_indptr: Any) -> None:
        if all(self._fixed):
            return
        n_q, total_q = _indptr_len_and_last(qo_indptr)
        _, total_kv = _indptr_len_and_last(kv_indptr)
        want = dict(self._args)
        if not self._fixed[0]:
            want["max_batch"] = _grow(want["max_batch"], n_q - 1)
        if not self._fixed[1]:
            want["max_q_tokens"] = _grow(want["max_q_tokens"], total_q)
        if not self._fixed[2]:
            want["max_kv_tokens"] = _grow(want["max_kv_tokens"], total_kv)
        if want != self._args:
            self._impl = _C.RaggedPrefill(**want)
            self._args = want

    def plan(self, qo_indptr: Any, kv_indptr: Any, *, causal: bool = False,
             sm_scale: Optional[float] = None, window_left: Optional[int] = -1,
             logits_soft_cap: Optional[float] = None, stream: Any = None) -> None:
        """Plans a batch on the host; never synchronizes the device.

        ``qo_indptr`` / ``kv_indptr``: ``batch_size + 1`` monotone offsets starting at 0, as a
        list, a NumPy array or a CPU torch tensor (int32 or int64). Sequence ``b`` owns q rows
        ``[qo_indptr[b], qo_indptr[b+1])`` and kv rows ``[kv_indptr[b], kv_indptr[b+1])``.

        ``causal``: query ``i`` of a sequence with lengths ``(lq, lk)`` sees keys
        ``j <= lk - lq + i`` (bottom-right aligned). ``sm_scale``: ``None`` means
        ``1/sqrt(head_dim_qk)`` (DeepSeek-V2/V3 attention with YaRN checkpoints needs
        :func:`mlakit.deepseek_softmax_scale` instead; their q and k must also carry RoPE in one
        pair layout). ``window_left = w >= 0``: keys ``j >= lk - lq + i - w`` only
        (``-1`` or ``None``: no window). ``logits_soft_cap = c > 0``: ``s = c*tanh(s/c)``.

        For a CUDA plan the schedule is copied to the device workspace asynchronously on
        ``stream`` (default: PyTorch's current stream when torch is loaded, else the default
        stream); run on the same stream, or order the streams yourself. A rejected plan
        (ValueError/TypeError) leaves the previous plan in force.
        """
        opts = _options(causal, sm_scale, window_left, logits_soft_cap)
        self._ensure_capacity(qo_indptr, kv_indptr)
        s = _stream_handle(stream, device=self._args["device"])
        self._impl.plan(qo_indptr, kv_indptr, opts, s)

    def run(self, q: Any, k: Any, v: Any, out: Any = None, lse: Any = None, *,
            return_lse: bool = False, lse_layout: str = "th", stream: Any = None,
            q_descale: Any = None, k_descale: Any = None, v_descale: Any = None) -> Any:
        """Attention for the current plan; only launches (CUDA graph capturable).

        ``q``/``out`` may hold more rows than the plan's ``total_q`` and ``k``/``v`` more than
        its ``total_kv`` (buffers sized for the largest batch): rows past the batch are neither
        read nor written. ``out`` (``[rows, H, Dvo]``, q's dtype) and ``lse`` (float32) are
        allocated with q's library when not given; ``lse`` is computed only when given or
        ``return_lse`` is true. ``lse_layout``: ``"th"`` = ``[rows, H]`` (default), ``"ht"`` =
        ``[H, rows]`` (FlashAttention's layout); any other strided lse works when passed in.
        The stream defaults to the caller's current stream (PyTorch's
        ``torch.cuda.current_stream()`` for torch tensors). Returns ``out``, or ``(out, lse)``
        when ``return_lse`` is true.

        e4m3 inputs: ``out`` is ``out_dtype``; ``q_descale`` / ``k_descale`` / ``v_descale``
        (FlashAttention-3's): optional float32 ``[>= batch, Hkv]`` arrays on the plan's device,
        entry ``[b, h]`` multiplying sequence ``b``'s kv head ``h`` (``None`` = 1).
        """
        if lse_layout != "th":
            _check_lse_layout(lse_layout)
        if q_descale is not None or k_descale is not None or v_descale is not None:
            return self._run_descaled(q, k, v, out, lse, return_lse, lse_layout, stream,
                                      q_descale, k_descale, v_descale)
        t = _TorchTensor
        if out is None and type(q) is t and stream is None and lse is None and not return_lse:
            # The common eager torch call: the extension allocates out as q.new_empty(rows, H, Dvo)
            # (as _empty below would) and returns it, one Python-level call instead of two.
            _shape(q, "q", 3)
            return self._impl.run(q, k if type(k) is t else _native(k), v if type(v) is t else _native(v),
                                  None, None, None)
        if out is None or (return_lse and lse is None):
            tq, h, _ = _shape(q, "q", 3)
            if out is None:
                out = _empty(q, (tq, h, self._impl.head_dim_vo), _out_dtype_arg(self._impl))
            if return_lse and lse is None:
                lse = _empty(q, (tq, h) if lse_layout == "th" else (h, tq), "float32")
        lse_view = lse if lse_layout == "th" else _lse_arg(lse, lse_layout, _shape(q, "q", 3)[0], self.num_qo_heads)
        if type(q) is t and stream is None:  # the common torch call: nothing to convert here
            self._impl.run(q, k if type(k) is t else _native(k), v if type(v) is t else _native(v),
                           out if type(out) is t else _native(out),
                           None if lse_view is None else _native(lse_view), None)
        else:
            self._impl.run(_native(q), _native(k), _native(v), _native(out),
                           None if lse_view is None else _native(lse_view), _stream_handle(stream, like=q))
        return (out, lse) if return_lse else out

    def _run_descaled(self, q: Any, k: Any, v: Any, out: Any, lse: Any, return_lse: bool, lse_layout: str,
                      stream: Any, q_descale: Any, k_descale: Any, v_descale: Any) -> Any:
        """run() with descale factors (e4m3 inputs)."""
        tq, h, _ = _shape(q, "q", 3)
        if out is None:
            out = _empty(q, (tq, h, self._impl.head_dim_vo), _out_dtype_arg(self._impl))
        if return_lse and lse is None:
            lse = _empty(q, (tq, h) if lse_layout == "th" else (h, tq), "float32")
        lse_view = _lse_arg(lse, lse_layout, tq, self.num_qo_heads)
        self._impl.run(_native(q), _native(k), _native(v), _native(out),
                       None if lse_view is None else _native(lse_view), _stream_handle(stream, like=q), False,
                       None if q_descale is None else _native(q_descale),
                       None if k_descale is None else _native(k_descale),
                       None if v_descale is None else _native(v_descale))
        return (out, lse) if return_lse else out

    def __repr__(self) -> str:
        a = self._args
        fp8 = f", out_dtype={a['out_dtype']!r}" if a["dtype"] == "e4m3" else ""
        return (f"mlakit.RaggedPrefill(num_qo_heads={a['num_qo_heads']}, num_kv_heads={a['num_kv_heads']}, "
                f"head_dim_qk={a['head_dim_qk']}, head_dim_vo={a['head_dim_vo']}, dtype={a['dtype']!r}{fp8}, "
                f"device={a['device']!r}, max_batch={a['max_batch']}, max_q_tokens={a['max_q_tokens']}, "
                f"max_kv_tokens={a['max_kv_tokens']})")


# --------------------------------------------------------------------------------------------
# Free functions
# --------------------------------------------------------------------------------------------

def ragged_prefill(q: Any, k: Any, v: Any, qo_indptr: Any, kv_indptr: Any, *, causal: bool = False,
                   sm_scale: Optional[float] = None, window_left: Optional[int] = -1,
                   logits_soft_cap: Optional[float] = None, out: Any = None, lse: Any = None,
                   return_lse: bool = False, lse_layout: str = "th", stream: Any = None) -> Any:
    """One-shot ragged prefill: plans and runs in one call (allocates a plan each call; engines
    should keep a :class:`RaggedPrefill`). Arguments as in :meth:`RaggedPrefill.plan` and
    :meth:`RaggedPrefill.run`; ``Dvo`` is taken from ``v``. e4m3 inputs (no descales here) write
    ``out``'s dtype, bf16 when ``out`` is not given."""
    opts = _options(causal, sm_scale, window_left, logits_soft_cap)
    _check_lse_layout(lse_layout)
    if out is None or (return_lse and lse is None) or lse_layout != "th":
        tq, h, _ = _shape(q, "q", 3)
        if out is None:
            fp8 = _dtype_name(q.dtype) == "e4m3"
            out = _empty(q, (tq, h, _shape(v, "v", 3)[2]), "bfloat16" if fp8 else None)
        if return_lse and lse is None:
            lse = _empty(q, (tq, h) if lse_layout == "th" else (h, tq), "float32")
        lse_view = _lse_arg(lse, lse_layout, tq, h)
    else:
        lse_view = lse
    _C.ragged_prefill(_native(q), _native(k), _native(v), qo_indptr, kv_indptr, opts, _native(out),
                      _native(lse_view), _launch_stream(stream, q))
    return (out, lse) if return_lse else out


def merge_states(out_a: Any, lse_a: Any, out_b: Any, lse_b: Any, out: Any = None, lse_out: Any = None,
                 *, stream: Any = None) -> Tuple[Any, Any]:
    """Merges two partial attentions over disjoint key sets by their log-sum-exp.

    ``out_*``: ``[N, H, D]`` (bf16, fp16 or fp32, all the same); ``lse_*``: ``[N, H]`` float32,
    tokens first (any strides: an ``[H, N]`` array such as FlashAttention's LSE passes as its
    ``.T``; see :func:`mlakit.torch.merge_attn_states` for vLLM's ``[H, N]`` signature).
    ``lse = log(exp(lse_a) + exp(lse_b))``,
    ``out = out_a*exp(lse_a - lse) + out_b*exp(lse_b - lse)``; ``-inf`` on one side passes the
    other through, both ``-inf`` gives ``out = 0, lse = -inf``. ``out``/``lse_out`` are allocated
    when not given and may be ``out_a``/``lse_a`` (in place). Returns ``(out, lse_out)``.
    """
    if out is None:
        out = _empty(out_a, _shape(out_a, "out_a", 3))
    if lse_out is None:
        lse_out = _empty(lse_a, _shape(lse_a, "lse_a", 2))
    try:
        _C.merge_states(_native(out_a), _native(lse_a), _native(out_b), _native(lse_b), _native(out),
                        _native(lse_out), _launch_stream(stream, out_a))
    except ValueError as e:
        raise _merge_error(e, out_a, (("lse_a", lse_a), ("lse_b", lse_b), ("lse_out", lse_out))) from None
    return out, lse_out


def reference_prefill(q: Any, k: Any, v: Any, qo_indptr: Any, kv_indptr: Any, *, causal: bool = False,
                      sm_scale: Optional[float] = None, window_left: Optional[int] = -1,
                      logits_soft_cap: Optional[float] = None, out: Any = None, lse: Any = None,
                      return_lse: bool = False, q_descale: Any = None, k_descale: Any = None,
                      v_descale: Any = None) -> Any:
    """The C++ float64 reference (host arrays only, single-threaded): the same function the C++
    tests compare every backend against. Inputs may be bf16/fp16/fp32/fp64/e4m3; ``out`` and
    ``lse`` default to float64 arrays of the input's library. e4m3 inputs take host float32
    ``q_descale`` / ``k_descale`` / ``v_descale`` ``[>= batch, Hkv]`` (``None`` = 1)."""
    opts = _options(causal, sm_scale, window_left, logits_soft_cap)
    if out is None or (return_lse and lse is None):
        tq, h, _ = _shape(q, "q", 3)
        dvo = _shape(v, "v", 3)[2]
        if out is None:
            out = _empty(q, (tq, h, dvo), "float64")
        if return_lse and lse is None:
            lse = _empty(q, (tq, h), "float64")
    _C.reference_prefill(_native(q), _native(k), _native(v), qo_indptr, kv_indptr, opts, out, lse,
                         None if q_descale is None else _native(q_descale),
                         None if k_descale is None else _native(k_descale),
                         None if v_descale is None else _native(v_descale))
    return (out, lse) if return_lse else out


def reference_merge_states(out_a: Any, lse_a: Any, out_b: Any, lse_b: Any, out: Any = None,
                           lse_out: Any = None) -> Tuple[Any, Any]:
    """float64 reference of :func:`merge_states` (host arrays); outputs default to float64."""
    if out is None:
        out = _empty(out_a, _shape(out_a, "out_a", 3), "float64")
    if lse_out is None:
        lse_out = _empty(lse_a, _shape(lse_a, "lse_a", 2), "float64")
    _C.reference_merge_states(_native(out_a), lse_a, _native(out_b), lse_b, out, lse_out)
    return out, lse_out


def info() -> dict:
    """What this build of mlakit is and what it runs on this machine, as a dict:

    ``version``, ``built_with_cuda``; ``cpu_isa``: the CPU backend's path for its matrix products,
    ``"amx"``, ``"avx512bf16"`` or ``"fp32"`` (the best this CPU grants, ``cpu_isa_best``, or a
    lower one forced with the environment variable ``MLAKIT_CPU_ISA``, echoed as
    ``cpu_isa_requested``; ``cpu_has_amx`` says whether the CPU and OS grant AMX tiles, which
    makes ``"amx"`` the best path); ``cpu_products``: the products each input dtype takes on the CPU
    (``{"bf16": cpu_isa, "fp16": "fp32", "e4m3": cpu_isa}``: e4m3 with its default bf16 output is decoded exactly into bf16; with an fp16 output it takes fp32 products); ``backends``: one dict per backend with ``name``
    (``"cpu"``, ``"cuda sm80"``, ``"cuda sm90"``), ``dtypes``, ``max_head_dim`` (the CPU
    backend: every head dim up to it) and ``shapes`` (the CUDA kernels: the
    ``(dtype, head_dim_qk, head_dim_vo)`` they are built for); ``latent_backends``: the same for
    :class:`LatentAttention`, with ``name`` (``"cpu"``, ``"cuda sm90"``), ``dtypes`` and the
    ``kv_lora_rank`` / ``qk_rope_head_dim`` it takes (None: any multiple of 32 up to 512 / 128) and
    the ``kv_cache_dtypes`` it reads (``"auto"``, ``"fp8"``, ``"fp8_ds_mla"``).
    """
    return _C.library_info()


def device_description(device: Any = "cpu") -> str:
    """E.g. ``"NVIDIA H200 (sm_90, 132 SMs)"`` or ``"cpu"``."""
    return _C.device_description(_device_name(device))


# The MLA prefill step (imports the helpers above, so it comes last).
from .mla import MlaPlanInfo, MlaStep  # noqa: E402
from .latent import LatentAttention, LatentPlanInfo  # noqa: E402
from .graph import StreamGraph  # noqa: E402
from .deepseek import deepseek_softmax_scale  # noqa: E402


def __dir__() -> list:
    # The public names only (not the modules and typing helpers imported above).
    return sorted(set(__all__) | {"__version__"} | {n for n in ("torch",) if n in globals()})
