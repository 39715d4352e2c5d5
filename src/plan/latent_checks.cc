#include "plan/latent_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "contract/kv_cache_format.h"
#include "mlakit/error.h"
#include "plan/block_table_check.h"
#include "plan/tensor_checks.h"

namespace mlakit {
namespace plan {

namespace {

[[noreturn]] void invalid(const std::string& name, const std::string& msg) {
  throw Error(ErrorKind::kInvalidArgument, name, msg);
}
[[noreturn]] void mismatch(const std::string& name, const std::string& msg) {
  throw Error(ErrorKind::kTypeMismatch, name, msg);
}
std::string str(int64_t x) { return std::to_string(x); }

bool is_float(DType t) {
  return t == DType::kBF16 || t == DType::kFP16 || t == DType::kFP32 || t == DType::kFP64;
}

// One tensor: rank and layout (tensor_checks.h), dtype, device, then sizes: `want` per dim, -1
// any, -2 at least `min_rows`. Sizes are checked after dtype and device so that a wrong kind of
// tensor is named for what it is.
void check(const TensorView& t, const char* name, std::initializer_list<int64_t> want, int64_t min_rows,
           bool dtype_ok, const char* dtype_want, Device device, bool cuda, bool any_last_stride = false) {
  check_layout(t, name, static_cast<int>(want.size()), any_last_stride);
  if (!dtype_ok) mismatch(name, std::string("dtype ") + dtype_name(t.dtype) + " must be " + dtype_want);
  if (t.device != device) mismatch(name, "is on " + to_string(t.device) + " but the plan runs on " + to_string(device));
  std::string want_s = "[";
  int d = 0;
  for (int64_t w : want) want_s += (d++ ? ", " : "") + (w == -2 ? ">= " + str(min_rows) : w == -1 ? "*" : str(w));
  want_s += "]";
  d = 0;
  for (int64_t w : want) {
    const bool ok = w == -1 || (w == -2 ? t.shape[d] >= min_rows : t.shape[d] == w);
    if (!ok) invalid(name, "shape " + shape_str(t) + " must be " + want_s);
    ++d;
  }
  if (cuda) check_16B(t, name);
}

}  // namespace

void check_latent_config(const LatentConfig& c) {
  if (c.num_heads < 1 || c.num_heads > 128) invalid("config.num_heads", "must be in [1, 128], got " + str(c.num_heads));
  // The CPU kernels move 32 values (16 bf16 pairs) at a time and keep O of kv_lora_rank floats
  // per row; the cache rows are L + R wide.
  if (c.kv_lora_rank < 32 || c.kv_lora_rank > 512 || c.kv_lora_rank % 32 != 0)
    invalid("config.kv_lora_rank", "must be a multiple of 32 in [32, 512], got " + str(c.kv_lora_rank));
  if (c.qk_rope_head_dim < 32 || c.qk_rope_head_dim > 128 || c.qk_rope_head_dim % 32 != 0)
    invalid("config.qk_rope_head_dim", "must be a multiple of 32 in [32, 128], got " + str(c.qk_rope_head_dim));
  if (c.dtype != DType::kBF16 && c.dtype != DType::kFP16)
    mismatch("config.dtype", std::string("must be bf16 or fp16, got ") + dtype_name(c.dtype));
  switch (c.kv_cache_dtype) {
    case KvCacheDtype::kAuto: break;
    case KvCacheDtype::kFp8DsMla:
      // The format is DeepSeek-V3.2's: its row layout fixes the widths, its rope part is bf16.
      if (c.kv_lora_rank != 512 || c.qk_rope_head_dim != 64 || c.dtype != DType::kBF16)
        invalid("config.kv_cache_dtype", "fp8_ds_mla rows need kv_lora_rank 512, qk_rope_head_dim 64 and dtype bf16, got (" +
                                             str(c.kv_lora_rank) + ", " + str(c.qk_rope_head_dim) + ", " +
                                             dtype_name(c.dtype) + ")");
      break;
    case KvCacheDtype::kFp8:
      if (c.dtype != DType::kBF16)
        invalid("config.kv_cache_dtype", std::string("fp8 caches are read with dtype bf16, got ") + dtype_name(c.dtype));
      break;
    default:
      invalid("config.kv_cache_dtype", "must be kAuto, kFp8 or kFp8DsMla, got " +
                                           str(static_cast<int>(c.kv_cache_dtype)));
  }
  if (c.block_size < 1 || c.block_size > 256 || (c.block_size & (c.block_size - 1)) != 0)
    invalid("config.block_size", "must be a power of two in [1, 256], got " + str(c.block_size));
  if (c.num_blocks <= 0) invalid("config.num_blocks", "must be > 0");
  if (c.num_blocks * c.block_size > INT32_MAX)
    invalid("config.num_blocks", "num_blocks * block_size must be < 2^31 (slots are int32)");
  if (c.max_batch <= 0) invalid("config.max_batch", "must be > 0");
  if (c.max_q_tokens <= 0) invalid("config.max_q_tokens", "must be > 0");
  // Packed rows (token * H + head) are int32.
  if (c.max_q_tokens * c.num_heads > INT32_MAX)
    invalid("config.max_q_tokens", "max_q_tokens * num_heads must be < 2^31");
  if (c.max_kv_tokens < 0 || c.max_kv_tokens > INT32_MAX)
    invalid("config.max_kv_tokens", "must be in [0, 2^31)");
  if (c.max_topk < 0 || c.max_topk > (1 << 20)) invalid("config.max_topk", "must be in [0, 2^20]");
  if (c.kv_split_size < 0 || c.kv_split_size % 64 != 0)
    invalid("config.kv_split_size", "must be a multiple of 64 (0 = the backend's choice), got " + str(c.kv_split_size));
  if (c.max_decoded_rows < 0 || c.max_decoded_rows > INT32_MAX)
    invalid("config.max_decoded_rows", "must be in [0, 2^31), got " + str(c.max_decoded_rows));
}

LatentTotals check_latent_plan(const LatentConfig& c, const LatentBatch& b, const LatentPlanOptions& o) {
  if (!std::isfinite(o.sm_scale) || o.sm_scale < 0.0f)
    invalid("options.sm_scale", "must be finite and >= 0 (0 = 1/sqrt(kv_lora_rank + qk_rope_head_dim))");
  if (o.topk < 0) invalid("options.topk", "must be >= 0 (0 = dense), got " + str(o.topk));
  if (o.topk > c.max_topk)
    invalid("options.topk", str(o.topk) + " exceeds config.max_topk = " + str(c.max_topk) +
                                (c.max_topk == 0 ? " (sparse plans need config.max_topk > 0)" : ""));
  if (o.indices != LatentIndices::kPositions && o.indices != LatentIndices::kSlots)
    invalid("options.indices", "must be kPositions or kSlots, got " + str(static_cast<int>(o.indices)));
  if (o.fp8_decode != LatentFp8Decode::kAuto && o.fp8_decode != LatentFp8Decode::kOnce &&
      o.fp8_decode != LatentFp8Decode::kInKernel)
    invalid("options.fp8_decode", "must be kAuto, kOnce or kInKernel, got " + str(static_cast<int>(o.fp8_decode)));
  if (b.batch_size < 0) invalid("batch_size", "must be >= 0, got " + str(b.batch_size));
  if (b.batch_size > c.max_batch)
    invalid("batch_size", str(b.batch_size) + " exceeds config.max_batch = " + str(c.max_batch));

  LatentTotals t;
  t.reads_table = o.topk == 0 || o.indices == LatentIndices::kPositions;
  if (b.batch_size > 0 && b.query_lens == nullptr) invalid("query_lens", "is null");
  for (int r = 0; r < b.batch_size; ++r) {
    if (b.query_lens[r] < 0)
      invalid("query_lens", "query_lens[" + str(r) + "] = " + str(b.query_lens[r]) + " is negative");
    t.total_q += b.query_lens[r];
  }
  if (t.total_q > c.max_q_tokens)
    invalid("query_lens", "total new tokens " + str(t.total_q) + " exceed config.max_q_tokens = " + str(c.max_q_tokens));
  if (!t.reads_table || b.batch_size == 0) return t;

  if (b.kv_lens == nullptr) invalid("kv_lens", "is null");
  if (b.block_table == nullptr && b.device_block_table == nullptr)
    invalid("block_table", "is null (give block_table or device_block_table)");
  if (b.block_table != nullptr && b.device_block_table != nullptr)
    invalid("block_table", "and device_block_table are both given: take one");
  if (b.block_table_cols <= 0) invalid("block_table_cols", "must be > 0");
  t.device_table = b.device_block_table != nullptr;
  for (int r = 0; r < b.batch_size; ++r) {
    const int64_t kv = b.kv_lens[r];
    if (kv < 0) invalid("kv_lens", "kv_lens[" + str(r) + "] = " + str(kv) + " is negative");
    t.total_kv += kv;
    const int64_t blocks = (kv + c.block_size - 1) / c.block_size;
    if (blocks > b.block_table_cols)
      invalid("block_table", "request " + str(r) + " needs " + str(blocks) + " blocks for " + str(kv) +
                                 " tokens but the table has " + str(b.block_table_cols) + " columns");
    if (t.device_table) continue;  // its entries live on the device: run() reads them unchecked
    check_block_table_row(b.block_table + static_cast<int64_t>(r) * b.block_table_cols, blocks, c.num_blocks, r);
  }
  if (t.total_kv > c.max_kv_tokens)
    invalid("kv_lens", "total cached tokens " + str(t.total_kv) + " exceed config.max_kv_tokens = " +
                           str(c.max_kv_tokens));
  return t;
}

void check_latent_tensors(const LatentConfig& c, const LatentPlanOptions& o, const LatentTotals& t,
                          const LatentLayer& y, const TensorView& out, const TensorView* lse,
                          const LatentTensorRules& rules) {
  const Device dev = rules.reference ? Device::cpu() : c.device;
  const int64_t H = c.num_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim, T = t.total_q;
  const bool cuda = rules.cuda;
  const char* in_want = rules.reference ? "a float dtype" : dtype_name(c.dtype);
  auto input_ok = [&](DType d) { return rules.reference ? is_float(d) : d == c.dtype; };
  const bool split_q = y.q_pe != nullptr;
  check(y.q, "q", {-2, H, split_q ? L : L + R}, T, input_ok(y.q.dtype), in_want, dev, cuda);
  if (split_q) {
    check(*y.q_pe, "q_pe", {-2, H, R}, T, y.q_pe->dtype == y.q.dtype, "q's dtype", dev, cuda);
  }
  if (c.kv_cache_dtype == KvCacheDtype::kFp8DsMla) {
    const bool bytes = y.kv_cache.dtype == DType::kUInt8 || y.kv_cache.dtype == DType::kE4M3;
    check(y.kv_cache, "kv_cache", {c.num_blocks, c.block_size, mla::kDsMlaRowBytes}, 0, bytes,
          "uint8 or e4m3 (fp8_ds_mla: 656-byte rows)", dev, cuda);
    // The scales are read as float32.
    if ((y.kv_cache.strides[0] | y.kv_cache.strides[1]) % 4 != 0 ||
        reinterpret_cast<uintptr_t>(y.kv_cache.data) % 4 != 0)
      invalid("kv_cache", "fp8_ds_mla rows must start at multiples of 4 bytes (their scales are float32)");
  } else if (c.kv_cache_dtype == KvCacheDtype::kFp8) {
    const bool bytes = y.kv_cache.dtype == DType::kUInt8 || y.kv_cache.dtype == DType::kE4M3;
    check(y.kv_cache, "kv_cache", {c.num_blocks, c.block_size, L + R}, 0, bytes,
          "uint8 or e4m3 (fp8: one code a value)", dev, cuda);
  } else {
    check(y.kv_cache, "kv_cache", {c.num_blocks, c.block_size, L + R}, 0, y.kv_cache.dtype == c.dtype,
          dtype_name(c.dtype), dev, cuda);
  }
  check_cache_scale(y.k_scale, c.kv_cache_dtype, dev, "object");

  const bool out_ok = rules.reference ? (out.dtype == DType::kFP32 || out.dtype == DType::kFP64) : out.dtype == c.dtype;
  const char* out_want = rules.reference ? "fp32 or fp64" : dtype_name(c.dtype);
  check(out, "out", {-2, H, L}, T, out_ok, out_want, dev, cuda);
  check_no_overlap(out, "out");
  auto check_row_scalars = [&](const TensorView* s, const char* name) {
    if (s == nullptr) return;
    const bool ok = s->dtype == DType::kFP32 || (rules.reference && s->dtype == DType::kFP64);
    check(*s, name, {-2, H}, T, ok, rules.reference ? "fp32 or fp64" : "fp32", dev, false, /*any_last_stride=*/true);
    check_no_overlap(*s, name);
  };
  check_row_scalars(lse, "lse");
  check_row_scalars(y.max_logits, "max_logits");

  if (y.attn_sink) {
    check(*y.attn_sink, "attn_sink", {H}, 0, y.attn_sink->dtype == DType::kFP32, "fp32", dev, false,
          /*any_last_stride=*/true);
  }
  if (o.topk == 0) {
    if (y.indices) invalid("indices", "the plan is dense (options.topk = 0); plan with topk > 0 for sparse attention");
    if (y.topk_length) invalid("topk_length", "the plan is dense (options.topk = 0): it takes no topk_length");
    return;
  }
  if (y.indices == nullptr) invalid("indices", "a sparse plan (options.topk = " + str(o.topk) + ") needs indices [T, topk]");
  check(*y.indices, "indices", {-2, -1}, T, y.indices->dtype == DType::kInt32, "int32", dev, cuda);
  if (y.indices->shape[1] != o.topk)
    invalid("indices", "shape " + shape_str(*y.indices) + ": its width must be the plan's topk = " + str(o.topk));
  if (y.topk_length) {
    check(*y.topk_length, "topk_length", {-2}, T, y.topk_length->dtype == DType::kInt32, "int32", dev, false,
          /*any_last_stride=*/true);
  }
}

}  // namespace plan
}  // namespace mlakit
