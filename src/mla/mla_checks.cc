#include "mla/mla_checks.h"

#include <cmath>
#include <string>

#include "cpu/kv_cache_codec.h"
#include "contract/kv_cache_format.h"
#include "mlakit/error.h"
#include "plan/block_table_check.h"
#include "plan/tensor_checks.h"

namespace mlakit {
namespace mla {

namespace {

using plan::shape_str;

[[noreturn]] void invalid(const std::string& name, const std::string& msg) {
  throw Error(ErrorKind::kInvalidArgument, name, msg);
}
[[noreturn]] void mismatch(const std::string& name, const std::string& msg) {
  throw Error(ErrorKind::kTypeMismatch, name, msg);
}
std::string str(int64_t x) { return std::to_string(x); }

// ndim, dtype, device, exact sizes (-1: any, -2: >= min_rows), contiguous last dim (unless
// `any_strides`), no negative strides, and for CUDA 16-byte aligned data and row strides.
void check_tensor(const TensorView& t, const char* name, std::initializer_list<int64_t> want,
                  int64_t min_rows, DType dtype, Device device, bool cuda, bool any_strides = false) {
  const int nd = static_cast<int>(want.size());
  std::string want_s = "[";
  {
    int d = 0;
    for (int64_t w : want) {
      want_s += (d++ ? ", " : "") + (w == -2 ? ">=" + str(min_rows) : str(w));
    }
    want_s += "]";
  }
  if (t.ndim != nd) invalid(name, "expected a " + str(nd) + "-D tensor " + want_s + ", got " + t.describe());
  if (t.dtype != dtype) {
    mismatch(name, std::string("dtype ") + dtype_name(t.dtype) + " must be " + dtype_name(dtype));
  }
  if (t.device != device) mismatch(name, "is on " + to_string(t.device) + " but the step runs on " + to_string(device));
  int d = 0;
  for (int64_t w : want) {
    const bool ok = w == -2 ? t.shape[d] >= min_rows : t.shape[d] == w;
    if (!ok) invalid(name, "shape " + shape_str(t) + " must be " + want_s);
    ++d;
  }
  if (t.data == nullptr && t.numel() > 0) invalid(name, "data is null");
  for (int i = 0; i < nd; ++i) {
    if (t.shape[i] > 1 && t.strides[i] < 0) invalid(name, "negative strides are not supported");
  }
  if (!any_strides && t.shape[nd - 1] > 1 && t.strides[nd - 1] != 1) {
    invalid(name, "the last dimension must be contiguous (stride 1): " + t.describe());
  }
  if (cuda && t.numel() > 0) {
    if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) invalid(name, "data pointer must be 16-byte aligned on CUDA");
    const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
    for (int i = 0; i + 1 < nd; ++i) {
      if (t.shape[i] > 1 && (t.strides[i] * es) % 16 != 0) {
        invalid(name, "stride " + str(i) + " must be a multiple of 16 bytes on CUDA: " + t.describe());
      }
    }
  }
}

// A [rows, H] output of one float per (token, head) written by several threads: no two elements
// may share an address. Ordered by stride, the outer dimension must step past the inner one's
// whole extent (a stride of 0, or a head stride reaching into the next token, fails).
void check_no_overlap_2d(const TensorView& t, const char* name) {
  if (t.numel() <= 1) return;
  bool overlap;
  if (t.shape[0] > 1 && t.shape[1] > 1) {
    const int in = t.strides[0] <= t.strides[1] ? 0 : 1;
    overlap = t.strides[in] < 1 || t.strides[1 - in] < t.strides[in] * t.shape[in];
  } else {  // a size-1 dimension never addresses anything
    overlap = t.strides[t.shape[0] > 1 ? 0 : 1] < 1;
  }
  if (overlap) invalid(name, "elements overlap in memory: " + t.describe());
}

[[noreturn]] void unsupported(const std::string& name, const std::string& msg) {
  throw Error(ErrorKind::kUnsupported, name, msg);
}

// The FP8 cache formats' own constraints (mlakit/mla.h, KvCacheDtype).
void check_kv_cache_dtype(const MlaConfig& c) {
  const int f = static_cast<int>(c.kv_cache_dtype);
  if (f < 0 || f > 2) invalid("config.kv_cache_dtype", "must be kAuto, kFp8 or kFp8DsMla, got " + str(f));
  if (c.kv_cache_dtype == KvCacheDtype::kAuto) return;
  // 16 codes are one 16-byte access of the CUDA gather and never straddle kv_c and k_pe.
  if (c.kv_lora_rank % 16 != 0) {
    invalid("config.kv_lora_rank", "must be a multiple of 16 with an FP8 cache (kv_cache_dtype " +
                                       std::string(kv_cache_dtype_name(c.kv_cache_dtype)) + ")");
  }
  if (c.qk_rope_head_dim % 16 != 0) {
    invalid("config.qk_rope_head_dim", "must be a multiple of 16 with an FP8 cache (kv_cache_dtype " +
                                           std::string(kv_cache_dtype_name(c.kv_cache_dtype)) + ")");
  }
  if (c.kv_cache_dtype != KvCacheDtype::kFp8DsMla) return;
  if (c.kv_lora_rank != kDsMlaLatent) {
    unsupported("config.kv_lora_rank", "kv_cache_dtype fp8_ds_mla (DeepSeek-V3.2's 656-byte rows) holds 512 latent "
                                       "values, got kv_lora_rank " + str(c.kv_lora_rank));
  }
  if (c.qk_rope_head_dim != kDsMlaRope) {
    unsupported("config.qk_rope_head_dim", "kv_cache_dtype fp8_ds_mla (DeepSeek-V3.2's 656-byte rows) holds 64 RoPE "
                                           "values, got qk_rope_head_dim " + str(c.qk_rope_head_dim));
  }
  if (c.dtype != DType::kBF16) {
    unsupported("config.dtype", std::string("kv_cache_dtype fp8_ds_mla stores k_pe in bf16: the step's dtype must be "
                                            "bf16, got ") + dtype_name(c.dtype));
  }
}

// The layer's cache: the 16-bit dtype's rows, or an FP8 format's bytes (e4m3 or uint8 alike).
void check_kv_cache(const MlaConfig& c, const TensorView& cache, bool cuda) {
  if (c.kv_cache_dtype == KvCacheDtype::kAuto) {
    check_tensor(cache, "kv_cache", {c.num_blocks, c.block_size, c.kv_lora_rank + c.qk_rope_head_dim}, 0, c.dtype,
                 c.device, cuda);
    return;
  }
  TensorView bytes = cache;
  if (bytes.dtype == DType::kUInt8) bytes.dtype = DType::kE4M3;  // the same bytes
  if (bytes.dtype != DType::kE4M3) {
    mismatch("kv_cache", std::string("dtype ") + dtype_name(cache.dtype) + " must be e4m3 or uint8 (kv_cache_dtype " +
                             kv_cache_dtype_name(c.kv_cache_dtype) + ")");
  }
  check_tensor(bytes, "kv_cache", {c.num_blocks, c.block_size, cache_row_elements(cache_codec(c))}, 0, DType::kE4M3,
               c.device, cuda);
}

}  // namespace

void check_config(const MlaConfig& c) {
  if (c.num_heads <= 0) invalid("config.num_heads", "must be > 0");
  const int split = static_cast<int>(c.kv_split);
  if (split < 0 || split > 2) invalid("config.kv_split", "must be kAuto, kOn or kOff, got " + std::to_string(split));
  // 16-byte copies of 8 half-precision values move latents and keys.
  if (c.kv_lora_rank <= 0 || c.kv_lora_rank % 8 != 0) invalid("config.kv_lora_rank", "must be a positive multiple of 8");
  if (c.qk_nope_head_dim <= 0 || c.qk_nope_head_dim % 8 != 0) {
    invalid("config.qk_nope_head_dim", "must be a positive multiple of 8");
  }
  if (c.qk_rope_head_dim <= 0 || c.qk_rope_head_dim % 8 != 0) {
    invalid("config.qk_rope_head_dim", "must be a positive multiple of 8");
  }
  if (c.v_head_dim <= 0 || c.v_head_dim % 8 != 0) invalid("config.v_head_dim", "must be a positive multiple of 8");
  if (c.dtype != DType::kBF16 && c.dtype != DType::kFP16) {
    mismatch("config.dtype", std::string("must be bf16 or fp16, got ") + dtype_name(c.dtype));
  }
  check_kv_cache_dtype(c);
  if (c.block_size <= 0) invalid("config.block_size", "must be > 0");
  if (c.num_blocks <= 0) invalid("config.num_blocks", "must be > 0");
  if (c.num_blocks * c.block_size > INT32_MAX) {
    invalid("config.num_blocks", "num_blocks * block_size must be < 2^31 (slots are int32)");
  }
  if (c.max_batch <= 0) invalid("config.max_batch", "must be > 0");
  if (c.max_tokens <= 0) invalid("config.max_tokens", "must be > 0");
  if (c.max_context_tokens < 0) invalid("config.max_context_tokens", "must be >= 0");
  if (c.max_tokens + c.max_context_tokens > INT32_MAX) {
    invalid("config.max_context_tokens", "max_tokens + max_context_tokens must be < 2^31");
  }
  if (c.absorb_max_query_len < -1) {
    invalid("config.absorb_max_query_len", "must be >= -1 (-1 = the backend's crossover, 0 = never), got " +
                                               str(c.absorb_max_query_len));
  }
  if (c.max_absorbed_tokens < 0) invalid("config.max_absorbed_tokens", "must be >= 0 (0 = min(max_tokens, 512))");
  if (c.max_topk < 0) invalid("config.max_topk", "must be >= 0 (0 = no sparse steps)");
  if (c.workspace_rows < 0) invalid("config.workspace_rows", "must be >= 0 (0 = max_tokens + max_context_tokens)");
  if (c.workspace_rows > 0 && c.workspace_rows < c.max_tokens) {
    invalid("config.workspace_rows", str(c.workspace_rows) + " is less than config.max_tokens = " +
                                         str(c.max_tokens) + " (the new tokens need one launch)");
  }
}

BatchTotals check_batch(const MlaConfig& c, const MlaLayout& l, const MlaBatch& b,
                        const MlaPlanOptions& o, const AbsorbRule& absorb, uint8_t* absorbed,
                        const uint8_t* forced) {
  if (b.batch_size < 0) invalid("batch_size", "must be >= 0, got " + str(b.batch_size));
  if (b.batch_size > c.max_batch) {
    invalid("batch_size", str(b.batch_size) + " exceeds config.max_batch = " + str(c.max_batch));
  }
  if (o.topk < 0 || o.topk > c.max_topk) {
    invalid("options.topk", "must be in [0, config.max_topk = " + str(c.max_topk) + "], got " + str(o.topk));
  }
  if (!std::isfinite(o.sm_scale) || o.sm_scale < 0.0f) {
    invalid("options.sm_scale", "must be finite and >= 0 (0 = 1/sqrt(qk head dim))");
  }
  BatchTotals t;
  if (b.batch_size > 0) {
    if (b.query_lens == nullptr) invalid("query_lens", "is null");
    if (b.context_lens == nullptr) invalid("context_lens", "is null");
    if (b.block_table == nullptr) invalid("block_table", "is null");
    if (b.block_table_cols <= 0) invalid("block_table_cols", "must be > 0");
  }
  for (int r = 0; r < b.batch_size; ++r) {
    const int64_t q = b.query_lens[r], ctx = b.context_lens[r];
    if (q < 0) invalid("query_lens", "query_lens[" + str(r) + "] = " + str(q) + " is negative");
    if (ctx < 0) invalid("context_lens", "context_lens[" + str(r) + "] = " + str(ctx) + " is negative");
    t.total_q += q;
    t.total_context += ctx;
    const int64_t blocks = (ctx + q + c.block_size - 1) / c.block_size;
    if (blocks > b.block_table_cols) {
      invalid("block_table", "request " + str(r) + " needs " + str(blocks) + " blocks for " + str(ctx) +
                                 " + " + str(q) + " tokens but the table has " + str(b.block_table_cols) +
                                 " columns");
    }
    plan::check_block_table_row(b.block_table + static_cast<int64_t>(r) * b.block_table_cols, blocks, c.num_blocks, r);
  }
  if (t.total_q > c.max_tokens) {
    invalid("query_lens", "total new tokens " + str(t.total_q) + " exceed config.max_tokens = " + str(c.max_tokens));
  }
  if (t.total_context > c.max_context_tokens) {
    invalid("context_lens", "total context tokens " + str(t.total_context) +
                                " exceed config.max_context_tokens = " + str(c.max_context_tokens));
  }
  if (b.slot_mapping != nullptr) {
    const int64_t slots = c.num_blocks * c.block_size;
    for (int64_t i = 0; i < t.total_q; ++i) {
      if (b.slot_mapping[i] < 0 || b.slot_mapping[i] >= slots) {
        invalid("slot_mapping", "slot_mapping[" + str(i) + "] = " + str(b.slot_mapping[i]) +
                                    " is outside [0, num_blocks * block_size = " + str(slots) + ")");
      }
    }
  }
  if (o.graph_absorbed_tokens < -1 || o.graph_absorbed_tokens > l.max_absorbed) {
    invalid("options.graph_absorbed_tokens", "must be in [-1, " + str(l.max_absorbed) +
                                                 "] (-1 = config.max_absorbed_tokens, which bounds it), got " +
                                                 str(o.graph_absorbed_tokens));
  }
  const int64_t cap = o.graph_rows > 0 && o.graph_absorbed_tokens >= 0 ? o.graph_absorbed_tokens : l.max_absorbed;
  t.absorbed = choose_absorbed(b, absorb, cap, absorbed, forced);
  if (t.absorbed.forced_left > 0) {
    invalid("options.topk", "the new tokens past topk attend sparsely in latent space and must fit " +
                                std::string(o.graph_rows > 0 && o.graph_absorbed_tokens >= 0
                                                ? "options.graph_absorbed_tokens"
                                                : "config.max_absorbed_tokens") +
                                " = " + str(cap) + "; this step has more");
  }
  t.absorbed_rows = o.graph_rows > 0 ? cap : t.absorbed.tokens;
  const int64_t rows = t.total_q + t.absorbed.up_context;
  t.gathered_rows = rows;
  t.chunked = rows > l.rows;
  if (o.graph_rows < 0) invalid("options.graph_rows", "must be >= 0");
  if (o.graph_rows > 0) {
    if (o.graph_rows > l.rows) {
      invalid("options.graph_rows", str(o.graph_rows) + " exceeds the workspace rows " + str(l.rows));
    }
    if (rows > o.graph_rows) {
      invalid("options.graph_rows", "this step's gathered rows (new tokens + the up-projected context, " + str(rows) +
                                        ") exceed graph_rows = " + str(o.graph_rows));
    }
  }
  return t;
}

void check_layer(const MlaConfig& c, const MlaLayer& y, const TensorView& out, const TensorView* lse,
                 const TensorRules& r) {
  const Device dev = c.device;
  const DType t = c.dtype;
  const int64_t H = c.num_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim;
  const int64_t Dn = c.qk_nope_head_dim, Dv = c.v_head_dim;
  check_tensor(y.q, "q", {-2, H, Dn + R}, r.total_q, t, dev, r.cuda);
  check_tensor(y.kv_c, "kv_c", {-2, L}, r.total_q, t, dev, r.cuda);
  check_tensor(y.k_pe, "k_pe", {-2, R}, r.total_q, t, dev, r.cuda);
  check_tensor(y.kv_b_proj, "kv_b_proj", {H * (Dn + Dv), L}, 0, t, dev, r.cuda);
  check_kv_cache(c, y.kv_cache, r.cuda);
  plan::check_cache_scale(&y.k_scale, c.kv_cache_dtype, c.device, "step");
  check_tensor(out, "out", {-2, H, Dv}, r.total_q, t, dev, r.cuda);
  if (lse) {
    // One float per (token, head): any non-overlapping strides, as RaggedPrefill takes ([T, H],
    // or an [H, T] buffer through a transposed view); attention and merge address it by both.
    check_tensor(*lse, "lse", {-2, H}, r.total_q, DType::kFP32, dev, false, /*any_strides=*/true);
    check_no_overlap_2d(*lse, "lse");
  }
}

void check_sparse_layer(const MlaConfig& c, const MlaLayer& y, int64_t total_q, int topk, bool cuda) {
  if (y.indices == nullptr) invalid("indices", "a sparse plan (options.topk > 0) needs the layer's indices [T, topk]");
  check_tensor(*y.indices, "indices", {-2, topk}, total_q, DType::kInt32, c.device, cuda);
  if (y.topk_length) check_tensor(*y.topk_length, "topk_length", {-2}, total_q, DType::kInt32, c.device, false);
}

}  // namespace mla
}  // namespace mlakit
