#include "core/prefill_checks.h"

#include <cstdint>
#include <string>

#include "mlakit/error.h"

namespace mlakit {
namespace backend {

namespace {
[[noreturn]] void bad(const char* name, const std::string& msg,
                      ErrorKind kind = ErrorKind::kInvalidArgument) {
  throw Error(kind, name, msg);
}
}  // namespace

void check_config(const PrefillConfig& c) {
  if (c.num_qo_heads <= 0) bad("config.num_qo_heads", "must be > 0");
  if (c.num_kv_heads <= 0) bad("config.num_kv_heads", "must be > 0");
  if (c.num_qo_heads % c.num_kv_heads != 0) {
    bad("config.num_kv_heads", "num_qo_heads (" + std::to_string(c.num_qo_heads) +
                                   ") must be a multiple of num_kv_heads (" +
                                   std::to_string(c.num_kv_heads) + ")");
  }
  if (c.head_dim_qk <= 0) bad("config.head_dim_qk", "must be > 0");
  if (c.head_dim_vo <= 0) bad("config.head_dim_vo", "must be > 0");
  if (c.dtype != DType::kBF16 && c.dtype != DType::kFP16) {
    bad("config.dtype", std::string("must be bf16 or fp16, got ") + dtype_name(c.dtype),
        ErrorKind::kTypeMismatch);
  }
  if (c.max_batch <= 0) bad("config.max_batch", "must be > 0");
  if (c.max_q_tokens <= 0 || c.max_q_tokens > INT32_MAX) {
    bad("config.max_q_tokens", "must be in 1 .. 2^31-1 (indptr arrays are int32)");
  }
  if (c.max_kv_tokens <= 0 || c.max_kv_tokens > INT32_MAX) {
    bad("config.max_kv_tokens", "must be in 1 .. 2^31-1 (indptr arrays are int32)");
  }
}

void check_capacity(const PrefillConfig& c, int batch_size, const plan::IndptrTotals& totals) {
  if (batch_size > c.max_batch) {
    bad("batch_size", std::to_string(batch_size) + " exceeds config.max_batch = " + std::to_string(c.max_batch));
  }
  if (totals.total_q > c.max_q_tokens) {
    bad("qo_indptr", "total q tokens " + std::to_string(totals.total_q) + " exceed config.max_q_tokens = " +
                         std::to_string(c.max_q_tokens));
  }
  if (totals.total_kv > c.max_kv_tokens) {
    bad("kv_indptr", "total kv tokens " + std::to_string(totals.total_kv) + " exceed config.max_kv_tokens = " +
                         std::to_string(c.max_kv_tokens));
  }
}

void check_matches_config(const PrefillConfig& c, const TensorView& q, const TensorView& k,
                          const TensorView& v) {
  if (q.dtype != c.dtype) {
    bad("q", std::string("dtype ") + dtype_name(q.dtype) + " differs from config.dtype " + dtype_name(c.dtype),
        ErrorKind::kTypeMismatch);
  }
  if (q.device != c.device) {
    bad("q", "is on " + to_string(q.device) + " but config.device is " + to_string(c.device),
        ErrorKind::kTypeMismatch);
  }
  if (q.shape[1] != c.num_qo_heads) {
    bad("q", "has " + std::to_string(q.shape[1]) + " heads, config.num_qo_heads is " + std::to_string(c.num_qo_heads));
  }
  if (k.shape[1] != c.num_kv_heads) {
    bad("k", "has " + std::to_string(k.shape[1]) + " heads, config.num_kv_heads is " + std::to_string(c.num_kv_heads));
  }
  if (q.shape[2] != c.head_dim_qk) {
    bad("q", "head dim " + std::to_string(q.shape[2]) + " differs from config.head_dim_qk " +
                 std::to_string(c.head_dim_qk));
  }
  if (v.shape[2] != c.head_dim_vo) {
    bad("v", "head dim " + std::to_string(v.shape[2]) + " differs from config.head_dim_vo " +
                 std::to_string(c.head_dim_vo));
  }
}

}  // namespace backend
}  // namespace mlakit
