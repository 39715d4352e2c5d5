"""Typed public API of mlakit (see __init__.py for the documentation)."""

from typing import Any, Literal, Optional, Tuple, Union, overload

from . import _mlakit as _C
from ._mlakit import PlanInfo as PlanInfo
from ._mlakit import PrefillOptions as PrefillOptions
from .mla import MlaPlanInfo as MlaPlanInfo, MlaStep as MlaStep
from .graph import StreamGraph as StreamGraph

__version__: str

# Any array speaking DLPack or the buffer protocol: torch.Tensor, cupy.ndarray, jax.Array,
# numpy.ndarray (bfloat16 via ml_dtypes).
Array = Any
# An int (cudaStream_t), torch.cuda.Stream, cupy.cuda.Stream or None (the caller's current stream).
StreamLike = Any
# Host int32/int64 array (list, tuple, numpy, CPU torch tensor) of batch_size + 1 offsets.
Indptr = Any
DTypeLike = Any  # "bf16" | "fp16" | torch.bfloat16 | numpy.float16 | ...
DeviceLike = Union[str, int, Any]  # "cpu" | "cuda" | "cuda:N" | torch.device | device index
LseLayout = Literal["th", "ht"]  # [tokens, heads] (default) | [heads, tokens] (FlashAttention's)

def built_with_cuda() -> bool: ...
def cuda_device_count() -> int: ...
def cuda_unavailable_reason() -> str: ...
def device_description(device: DeviceLike = ...) -> str: ...

class RaggedPrefill:
    handle: int
    def __init__(self, num_qo_heads: int, num_kv_heads: int, head_dim_qk: int = ..., head_dim_vo: int = ...,
                 *, dtype: DTypeLike = ..., device: DeviceLike = ..., max_batch: Optional[int] = ...,
                 max_q_tokens: Optional[int] = ..., max_kv_tokens: Optional[int] = ..., kv_split: str = ...,
                 out_dtype: DTypeLike = ...) -> None: ...
    @property
    def num_qo_heads(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def head_dim_qk(self) -> int: ...
    @property
    def head_dim_vo(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def out_dtype(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def max_q_tokens(self) -> int: ...
    @property
    def max_kv_tokens(self) -> int: ...
    @property
    def planned(self) -> bool: ...
    @property
    def info(self) -> PlanInfo: ...
    @property
    def causal(self) -> bool: ...
    @property
    def sm_scale(self) -> float: ...
    @property
    def window_left(self) -> int: ...
    @property
    def logits_soft_cap(self) -> float: ...
    def plan(self, qo_indptr: Indptr, kv_indptr: Indptr, *, causal: bool = ..., sm_scale: Optional[float] = ...,
             window_left: Optional[int] = ..., logits_soft_cap: Optional[float] = ...,
             stream: StreamLike = ...) -> None: ...
    @overload
    def run(self, q: Array, k: Array, v: Array, out: Optional[Array] = ..., lse: Optional[Array] = ..., *,
            return_lse: Literal[False] = ..., lse_layout: LseLayout = ..., stream: StreamLike = ...,
            q_descale: Optional[Array] = ..., k_descale: Optional[Array] = ...,
            v_descale: Optional[Array] = ...) -> Array: ...
    @overload
    def run(self, q: Array, k: Array, v: Array, out: Optional[Array] = ..., lse: Optional[Array] = ..., *,
            return_lse: Literal[True], lse_layout: LseLayout = ..., stream: StreamLike = ...,
            q_descale: Optional[Array] = ..., k_descale: Optional[Array] = ...,
            v_descale: Optional[Array] = ...) -> Tuple[Array, Array]: ...

@overload
def ragged_prefill(q: Array, k: Array, v: Array, qo_indptr: Indptr, kv_indptr: Indptr, *, causal: bool = ...,
                   sm_scale: Optional[float] = ..., window_left: Optional[int] = ...,
                   logits_soft_cap: Optional[float] = ..., out: Optional[Array] = ..., lse: Optional[Array] = ...,
                   return_lse: Literal[False] = ..., lse_layout: LseLayout = ...,
                   stream: StreamLike = ...) -> Array: ...
@overload
def ragged_prefill(q: Array, k: Array, v: Array, qo_indptr: Indptr, kv_indptr: Indptr, *, causal: bool = ...,
                   sm_scale: Optional[float] = ..., window_left: Optional[int] = ...,
                   logits_soft_cap: Optional[float] = ..., out: Optional[Array] = ..., lse: Optional[Array] = ...,
                   return_lse: Literal[True], lse_layout: LseLayout = ...,
                   stream: StreamLike = ...) -> Tuple[Array, Array]: ...
def merge_states(out_a: Array, lse_a: Array, out_b: Array, lse_b: Array, out: Optional[Array] = ...,
                 lse_out: Optional[Array] = ..., *, stream: StreamLike = ...) -> Tuple[Array, Array]: ...
@overload
def reference_prefill(q: Array, k: Array, v: Array, qo_indptr: Indptr, kv_indptr: Indptr, *, causal: bool = ...,
                      sm_scale: Optional[float] = ..., window_left: Optional[int] = ...,
                      logits_soft_cap: Optional[float] = ..., out: Optional[Array] = ...,
                      lse: Optional[Array] = ..., return_lse: Literal[False] = ..., q_descale: Optional[Array] = ...,
                      k_descale: Optional[Array] = ..., v_descale: Optional[Array] = ...) -> Array: ...
@overload
def reference_prefill(q: Array, k: Array, v: Array, qo_indptr: Indptr, kv_indptr: Indptr, *, causal: bool = ...,
                      sm_scale: Optional[float] = ..., window_left: Optional[int] = ...,
                      logits_soft_cap: Optional[float] = ..., out: Optional[Array] = ...,
                      lse: Optional[Array] = ..., return_lse: Literal[True], q_descale: Optional[Array] = ...,
                      k_descale: Optional[Array] = ..., v_descale: Optional[Array] = ...) -> Tuple[Array, Array]: ...
def reference_merge_states(out_a: Array, lse_a: Array, out_b: Array, lse_b: Array, out: Optional[Array] = ...,
                           lse_out: Optional[Array] = ...) -> Tuple[Array, Array]: ...
def _lookup(handle: int) -> RaggedPrefill: ...
def __dir__() -> list[str]: ...
