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
  if (c.dtype != DType::kBF16 && c.dtype != DType::kFP16 && c.dtype != DType::kE4M3) {
    bad("config.dtype", std::string("must be bf16, fp16 or e4m3, got ") + dtype_name(c.dtype),
        ErrorKind::kTypeMismatch);
  }
  if (c.dtype == DType::kE4M3 && c.out_dtype != DType::kBF16 && c.out_dtype != DType::kFP16) {
    bad("config.out_dtype", std::string("the output of e4m3 inputs must be bf16 or fp16, got ") + dtype_name(c.out_dtype),
        ErrorKind::kTypeMismatch);
  }
  if (c.max_batch <= 0) bad("config.max_batch", "must be > 0");
  if (c.max_q_tokens <= 0 || c.max_q_tokens > INT32_MAX) {
    bad("config.max_q_tokens", "must be in 1 .. 2^31-1 (indptr arrays are int32)");
  }
  if (c.max_kv_tokens <= 0 || c.max_kv_tokens > INT32_MAX) {
    bad("config.max_kv_tokens", "must be in 1 .. 2^31-1 (indptr arrays are int32)");
  }
  const int split = static_cast<int>(c.kv_split);
  if (split < 0 || split > 2) bad("config.kv_split", "must be kAuto, kOn or kOff, got " + std::to_string(split));
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


}  // namespace backend
}  // namespace mlakit
