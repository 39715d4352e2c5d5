#include "plan/validate_split.h"

#include <string>

#include "mlakit/error.h"

namespace mlakit {
namespace plan {

namespace {
[[noreturn]] void invalid(const char* name, const std::string& msg) {
  throw Error(ErrorKind::kInvalidArgument, name, msg);
}
}  // namespace

TensorView validate_split_k_tensors(const TensorView& q, const TensorView& k,
                                    const TensorView& k_rope, const TensorView& v,
                                    const TensorView& out, const TensorView* lse,
                                    const IndptrTotals& totals, const TensorRules& rules) {
  if (q.ndim != 3) invalid("q", "expected a 3-D tensor, got " + q.describe());
  if (k.ndim != 3) invalid("k", "expected a 3-D tensor, got " + k.describe());
  if (k_rope.ndim != 2 && k_rope.ndim != 3) {
    invalid("k_rope", "expected [T, R] or [T, heads, R], got " + k_rope.describe());
  }
  TensorView kr = k_rope;
  if (k_rope.ndim == 2) {  // one row shared by every head: [T, 1, R]
    kr.ndim = 3;
    kr.shape[2] = k_rope.shape[1];
    kr.strides[2] = k_rope.strides[1];
    kr.shape[1] = 1;
    kr.strides[1] = 0;
  }
  const int64_t rope = kr.shape[2];
  const int64_t dqk = q.shape[2];
  if (rope <= 0 || rope >= dqk) {
    invalid("k_rope", "RoPE dim " + std::to_string(rope) + " must be in 1 .. head_dim_qk - 1 = " +
                          std::to_string(dqk - 1));
  }
  // Both parts are copied in 16-byte pieces of 8 half-precision values.
  if (rope % 8 != 0) invalid("k_rope", "RoPE dim " + std::to_string(rope) + " must be a multiple of 8");
  if (k.shape[2] + rope != dqk) {
    invalid("k", "head dim " + std::to_string(k.shape[2]) + " + k_rope's " + std::to_string(rope) +
                     " must equal q's head dim " + std::to_string(dqk));
  }
  if (kr.dtype != q.dtype) {
    throw Error(ErrorKind::kTypeMismatch, "k_rope",
                std::string("dtype ") + dtype_name(kr.dtype) + " differs from q's " + dtype_name(q.dtype) +
                    " (q, k, k_rope and v share one dtype)");
  }
  if (kr.device != q.device) {
    throw Error(ErrorKind::kTypeMismatch, "k_rope",
                "is on " + to_string(kr.device) + " but q is on " + to_string(q.device));
  }
  if (kr.shape[0] != k.shape[0]) {
    invalid("k_rope", "has " + std::to_string(kr.shape[0]) + " tokens but k has " + std::to_string(k.shape[0]));
  }
  if (kr.shape[1] != 1 && kr.shape[1] != k.shape[1]) {
    invalid("k_rope", "must have 1 head (shared) or k's " + std::to_string(k.shape[1]) + ", got " +
                          std::to_string(kr.shape[1]));
  }
  if (kr.shape[0] > 0 && kr.data == nullptr) invalid("k_rope", "data is null");
  if (kr.strides[2] != 1) invalid("k_rope", "the last dimension must be contiguous: " + k_rope.describe());
  if (kr.strides[0] < 0 || kr.strides[1] < 0) invalid("k_rope", "negative strides are not supported");
  if (rules.need_16B_alignment && kr.shape[0] > 0) {
    if (reinterpret_cast<uintptr_t>(kr.data) % 16 != 0) {
      invalid("k_rope", "data pointer must be 16-byte aligned for the CUDA backend");
    }
    const int64_t es = static_cast<int64_t>(dtype_size(kr.dtype));
    if ((kr.strides[0] * es) % 16 != 0 || (kr.shape[1] > 1 && (kr.strides[1] * es) % 16 != 0)) {
      invalid("k_rope", "strides must be multiples of 16 bytes for the CUDA backend");
    }
  }
  // The shared checks see K at its full width; k's own width was checked above.
  TensorView k_full = k;
  k_full.shape[2] = dqk;
  validate_prefill_tensors(q, k_full, v, out, lse, totals, rules);
  return kr;
}

}  // namespace plan
}  // namespace mlakit
