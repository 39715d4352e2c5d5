"""Stubs for the native extension mlakit._mlakit (private; use the `mlakit` package).

Array arguments are typed `object`: anything speaking DLPack (`__dlpack__`) or the buffer
protocol, a `_Reinterpreted` wrapper, or (once `_register_torch` ran) a torch tensor, whose
metadata the extension reads itself. Streams are cudaStream_t values as ints (0 = default); the
launching functions also take None: PyTorch's current stream on the first tensor's device (0 for a
CPU or non-torch array).
"""

from typing import Any

class _Reinterpreted:
    """A 16-bit integer array to be read as another 16-bit dtype (NumPy bfloat16)."""
    def __init__(self, array: object, dtype: str) -> None: ...
    @property
    def array(self) -> Any: ...

def _register_torch(tensor_type: type, dtypes: tuple, int64: object, raw_stream: object) -> None:
    """torch.Tensor, its (bf16, fp16, fp32, fp64, int32) dtypes, torch.int64, and a device index ->
    current cudaStream_t callable: the launching functions then take torch tensors directly."""
def _torch_exchange_in_use() -> bool: ...
def _read_torch_view(obj: object, path: str) -> tuple | None: ...
def _host_offsets_key(a: object, b: object) -> bytes | None:
    """Two contiguous 1-D int32/int64 CPU torch tensors' element sizes, lengths and bytes as one
    bytes object; None when either is not such a tensor."""
def _same_source(src: tuple | None, cu_q: object, cu_k: object) -> bool:
    """Whether two offset tensors match a version-counter record of mlakit._varlen._source."""
def _error_type_for_kind(kind: int) -> type[Exception]: ...
def _raise_for_kind(kind: int, argument: str, message: str) -> None: ...

def built_with_cuda() -> bool:
    """True when the library was compiled with its CUDA backends."""

def cuda_device_count() -> int:
    """Usable CUDA devices; 0 without CUDA support, driver or GPU."""

def cuda_unavailable_reason() -> str:
    """Why CUDA is unusable here; empty when it is usable."""

def graph_rows_bucket(rows: int, cap: int, step_above: int = 256) -> int:
    """The MlaStep.plan(graph_rows=...) bucket of a step of `rows` rows under a workspace of `cap`."""

def device_description(device: str) -> str:
    """E.g. 'NVIDIA H200 (sm_90, 132 SMs)' or 'cpu'."""

def library_info() -> dict:
    """
    What this build is and runs here: version, CUDA, the CPU backend's path (cpu_isa), the products per dtype, and each backend's dtypes and head dims.
    """

class PrefillOptions:
    """Masking and scaling options of a plan (mlakit::PrefillOptions)."""
    causal: bool
    sm_scale: float
    window_left: int
    logits_soft_cap: float
    def __init__(self, *, causal: bool = False, sm_scale: float = 0.0, window_left: int = -1,
                 logits_soft_cap: float = 0.0) -> None: ...
    def __eq__(self, other: object) -> bool: ...
    def __repr__(self) -> str: ...

class PlanInfo:
    """What the last plan() decided."""

    @property
    def batch_size(self) -> int: ...

    @property
    def total_q(self) -> int: ...

    @property
    def total_kv(self) -> int: ...

    @property
    def num_tiles(self) -> int:
        """(sequence, q-tile) pairs; each runs once per q head"""

    @property
    def block_m(self) -> int:
        """q rows per tile"""

    @property
    def block_n(self) -> int:
        """kv rows per inner step"""

    @property
    def grid_blocks(self) -> int:
        """persistent blocks run() launches"""

    @property
    def visible_pairs(self) -> int:
        """unmasked (query, key) pairs summed over the batch, per head"""

    @property
    def kernel_arch(self) -> int:
        """0: CPU backend; 80 or 90: the CUDA kernel"""

    @property
    def kv_split(self) -> bool:
        """this object splits key ranges (kv_split resolved)"""

    @property
    def split_slots(self) -> int:
        """(q tile, head) pairs this plan runs as two halves of the key range"""

    @property
    def cpu_isa(self) -> str:
        """CPU backend: the products run() takes, 'amx', 'avx512bf16' or 'fp32'; '' for CUDA"""

    def __repr__(self) -> str: ...

class RaggedPrefill:
    """Ragged prefill attention with a plan/run split (native object)."""

    def __init__(self, num_qo_heads: int, num_kv_heads: int, head_dim_qk: int, head_dim_vo: int, dtype: str, max_batch: int, max_q_tokens: int, max_kv_tokens: int, device: str, kv_split: str = 'auto', out_dtype: str = 'bf16') -> None: ...

    def plan(self, qo_indptr: object, kv_indptr: object, options: PrefillOptions, stream: int) -> None: ...

    def run(self, q: object, k: object, v: object, out: object, lse: object, stream: int | None,
            lse_head_major: bool = False, q_descale: object = None, k_descale: object = None,
            v_descale: object = None) -> Any: ...

    @property
    def planned(self) -> bool: ...

    def info(self) -> PlanInfo: ...

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
    def out_dtype(self) -> str:
        """the output's dtype: the input dtype, or out_dtype for e4m3 inputs"""

    @property
    def device(self) -> str: ...

    @property
    def max_batch(self) -> int: ...

    @property
    def max_q_tokens(self) -> int: ...

    @property
    def max_kv_tokens(self) -> int: ...

    @property
    def options(self) -> PrefillOptions:
        """options of the current plan (a copy)"""

    @property
    def causal(self) -> bool: ...

    @property
    def sm_scale(self) -> float: ...

    @property
    def window_left(self) -> int: ...

    @property
    def logits_soft_cap(self) -> float: ...

    @staticmethod
    def workspace_sizes(num_qo_heads: int, num_kv_heads: int, head_dim_qk: int, head_dim_vo: int, dtype: str, max_batch: int, max_q_tokens: int, max_kv_tokens: int, device: str, kv_split: str = 'auto', out_dtype: str = 'bf16') -> tuple[int, int]:
        """(host_bytes, device_bytes) the object would allocate."""

def ragged_prefill(q: object, k: object, v: object, qo_indptr: object, kv_indptr: object, options: PrefillOptions, out: object, lse: object, stream: int | None) -> None: ...

def merge_states(out_a: object, lse_a: object, out_b: object, lse_b: object, out: object, lse_out: object, stream: int | None) -> None: ...

def reference_prefill(q: object, k: object, v: object, qo_indptr: object, kv_indptr: object, options: PrefillOptions, out: object, lse: object, q_descale: object = None, k_descale: object = None, v_descale: object = None) -> None: ...

def reference_merge_states(out_a: object, lse_a: object, out_b: object, lse_b: object, out: object, lse_out: object) -> None: ...

class LatentPlanInfo:
    """What the last LatentAttention.plan() decided."""
    @property
    def batch_size(self) -> int: ...
    @property
    def total_q(self) -> int: ...
    @property
    def total_kv(self) -> int: ...
    @property
    def sparse(self) -> bool: ...
    @property
    def topk(self) -> int: ...
    @property
    def num_items(self) -> int:
        """Work items: a block of <= block_rows (token, head) rows over one key range."""
    @property
    def num_merges(self) -> int:
        """Row blocks whose split key ranges are merged by LSE."""
    @property
    def partial_rows(self) -> int: ...
    @property
    def block_rows(self) -> int: ...
    @property
    def kv_split_size(self) -> int: ...
    @property
    def visible_pairs(self) -> int:
        """Dense: visible (query, key) pairs per head; sparse: total_q * topk."""
    @property
    def cpu_isa(self) -> str: ...
    def __repr__(self) -> str: ...

class LatentAttention:
    """Latent-space MLA attention (native object; mlakit.LatentAttention wraps it)."""
    def __init__(self, num_heads: int, kv_lora_rank: int, qk_rope_head_dim: int, dtype: str, kv_cache_dtype: str,
                 block_size: int, num_blocks: int, max_batch: int, max_q_tokens: int, max_kv_tokens: int,
                 max_topk: int, kv_split_size: int, device: str, upload_in_run: bool) -> None: ...
    def plan(self, query_lens: object, kv_lens: object, block_table: object, block_table_cols: int,
             sm_scale: float, causal: bool, topk: int, indices: str, batch_invariant: bool, stream: int) -> None: ...
    def run(self, q: object, q_pe: object, kv_cache: object, indices: object, topk_length: object,
            attn_sink: object, k_scale: object, out: object, lse: object, max_logits: object, lse_head_major: bool,
            stream: int | None) -> None: ...
    @property
    def planned(self) -> bool: ...
    def info(self) -> LatentPlanInfo: ...
    @property
    def num_heads(self) -> int: ...
    @property
    def kv_lora_rank(self) -> int: ...
    @property
    def qk_rope_head_dim(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def num_blocks(self) -> int: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def max_q_tokens(self) -> int: ...
    @property
    def max_kv_tokens(self) -> int: ...
    @property
    def max_topk(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def causal(self) -> bool: ...
    @property
    def sm_scale(self) -> float: ...
    @property
    def topk(self) -> int: ...
    @staticmethod
    def workspace_sizes(num_heads: int, kv_lora_rank: int, qk_rope_head_dim: int, dtype: str, kv_cache_dtype: str,
                        block_size: int, num_blocks: int, max_batch: int, max_q_tokens: int, max_kv_tokens: int,
                        max_topk: int, kv_split_size: int, device: str, upload_in_run: bool) -> tuple[int, int]: ...
