// Argument checks shared by RaggedPrefill, ragged_prefill, merge_states and the reference.
// All checks run before any backend touches memory, and each error names one argument.
#include "plan/validate.h"

#include "plan/tensor_checks.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "mlakit/error.h"

namespace mlakit {
namespace plan {

namespace {

[[noreturn]] void invalid(const char* name, const std::string& msg) {
  throw Error(ErrorKind::kInvalidArgument, name, msg);
}
[[noreturn]] void mismatch(const char* name, const std::string& msg) {
  throw Error(ErrorKind::kTypeMismatch, name, msg);
}

bool is_half(DType t) { return t == DType::kBF16 || t == DType::kFP16; }
bool is_wide(DType t) { return t == DType::kFP32 || t == DType::kFP64; }
bool is_fp8(DType t) { return t == DType::kE4M3; }

// The input dtypes a call accepts, for error messages.
std::string supported_inputs(bool wide) {
  return wide ? "q, k and v share one dtype: bf16, fp16, fp32, fp64 or e4m3"
              : "q, k and v share one dtype: bf16, fp16 or e4m3 (FP8: all three e4m3, output bf16 or fp16)";
}

}  // namespace

std::string shape_str(const TensorView& t) {
  std::string s = "[";
  for (int d = 0; d < t.ndim; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + "]";
}

// Rank, null data, non-negative sizes/strides, natural element alignment and, unless
// `any_last_stride` (a scalar-per-row tensor such as lse), a unit last stride.
// Strides of size-1 dimensions are never used for addressing, so they are not checked.
void check_layout(const TensorView& t, const char* name, int ndim, bool any_last_stride) {
  if (t.ndim != ndim) {
    invalid(name, "expected a " + std::to_string(ndim) + "-D tensor, got " + t.describe());
  }
  for (int d = 0; d < ndim; ++d) {
    if (t.shape[d] < 0) invalid(name, "negative size in " + t.describe());
  }
  if (t.data == nullptr && t.numel() > 0) invalid(name, "data is null for " + t.describe());
  for (int d = 0; d < ndim; ++d) {
    if (t.shape[d] > 1 && t.strides[d] < 0) {
      invalid(name, "negative strides are not supported: " + t.describe());
    }
  }
  if (!any_last_stride && t.shape[ndim - 1] > 1 && t.strides[ndim - 1] != 1) {
    invalid(name, "the last dimension must be contiguous (stride 1): " + t.describe());
  }
  size_t es = dtype_size(t.dtype);
  if (t.data && es > 0 && reinterpret_cast<uintptr_t>(t.data) % es != 0) {
    invalid(name, "data pointer is not aligned to its element size");
  }
}

// An output written by several threads must not have two elements at one address (a stride of
// 0, or a [T, H] view whose head stride steps into the next token). Sufficient test: ordered by
// stride, each dimension steps past the whole extent of the ones inside it.
void check_no_overlap(const TensorView& t, const char* name) {
  if (t.numel() <= 1) return;
  int dims[TensorView::kMaxDims];
  int n = 0;
  for (int d = 0; d < t.ndim && d < TensorView::kMaxDims; ++d) {
    if (t.shape[d] <= 1) continue;
    int i = n++;  // insertion sort by stride (at most 4 entries)
    for (; i > 0 && t.strides[dims[i - 1]] > t.strides[d]; --i) dims[i] = dims[i - 1];
    dims[i] = d;
  }
  int64_t extent = 1;  // elements spanned by the dimensions inside the current one
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    if (t.strides[d] < extent) {
      invalid(name, "elements overlap in memory (stride " + std::to_string(d) + " = " +
                        std::to_string(t.strides[d]) + " is too small): " + t.describe());
    }
    extent = t.strides[d] * t.shape[d];
  }
}

// 16-byte vector loads/stores: the base pointer and the byte size of every row step must be
// multiples of 16 (CUDA backends).
void check_16B(const TensorView& t, const char* name) {
  if (t.numel() == 0) return;
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    invalid(name, "data pointer must be 16-byte aligned for the CUDA backend");
  }
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype));
  for (int d = 0; d + 1 < t.ndim; ++d) {
    if (t.shape[d] > 1 && (t.strides[d] * es) % 16 != 0) {
      invalid(name, "stride " + std::to_string(d) + " (" + std::to_string(t.strides[d]) +
                        " elements) must be a multiple of 16 bytes for the CUDA backend");
    }
  }
}

void check_cache_scale(const TensorView* scale, KvCacheDtype format, Device device, const char* owner) {
  const bool given = scale != nullptr && scale->data != nullptr;
  if (format != KvCacheDtype::kFp8) {
    if (given) {
      mismatch("k_scale", std::string("only kv_cache_dtype fp8 takes a cache scale; this ") + owner + "'s is " +
                              kv_cache_dtype_name(format));
    }
    return;
  }
  if (!given) invalid("k_scale", "kv_cache_dtype fp8 needs the layer's cache scale: a float32 tensor of one element");
  const TensorView& s = *scale;
  if (s.dtype != DType::kFP32) mismatch("k_scale", std::string("dtype ") + dtype_name(s.dtype) + " must be fp32");
  if (s.device != device) {
    mismatch("k_scale", "is on " + to_string(s.device) + " but the " + owner + " runs on " + to_string(device));
  }
  if (s.ndim > 1 || s.numel() != 1) invalid("k_scale", "must hold one element ([] or [1]), got " + s.describe());
  if (reinterpret_cast<uintptr_t>(s.data) % alignof(float) != 0) invalid("k_scale", "data pointer must be 4-byte aligned");
}

namespace {

void check_same_device(const TensorView& t, const char* name, const TensorView& ref) {
  if (t.device != ref.device) {
    mismatch(name, "is on " + to_string(t.device) + " but q is on " + to_string(ref.device));
  }
}

void check_indptr_array(const int32_t* p, const char* name, int batch_size, int64_t* total,
                        int64_t* max_len) {
  if (p == nullptr) invalid(name, "is null");
  if (p[0] != 0) invalid(name, std::string(name) + "[0] must be 0, got " + std::to_string(p[0]));
  int64_t mx = 0;
  for (int b = 0; b < batch_size; ++b) {
    int64_t len = static_cast<int64_t>(p[b + 1]) - p[b];
    if (len < 0) {
      invalid(name, "must be non-decreasing, but " + std::string(name) + "[" + std::to_string(b + 1) +
                        "] = " + std::to_string(p[b + 1]) + " < " + std::string(name) + "[" +
                        std::to_string(b) + "] = " + std::to_string(p[b]));
    }
    if (len > mx) mx = len;
  }
  *total = p[batch_size];
  *max_len = mx;
}

}  // namespace

IndptrTotals validate_indptr(const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size) {
  if (batch_size < 0) invalid("batch_size", "must be >= 0, got " + std::to_string(batch_size));
  IndptrTotals t;
  check_indptr_array(qo_indptr, "qo_indptr", batch_size, &t.total_q, &t.max_q_len);
  check_indptr_array(kv_indptr, "kv_indptr", batch_size, &t.total_kv, &t.max_kv_len);
  return t;
}

void validate_options(const PrefillOptions& o) {
  if (o.window_left < -1) {
    invalid("options.window_left", "must be -1 (no window) or >= 0, got " + std::to_string(o.window_left));
  }
  if (!std::isfinite(o.sm_scale) || o.sm_scale < 0.0f) {
    invalid("options.sm_scale", "must be finite and >= 0 (0 = 1/sqrt(head_dim_qk)), got " +
                                    std::to_string(o.sm_scale));
  }
  if (!std::isfinite(o.logits_soft_cap) || o.logits_soft_cap < 0.0f) {
    invalid("options.logits_soft_cap", "must be finite and >= 0 (0 = off), got " +
                                           std::to_string(o.logits_soft_cap));
  }
}

namespace {

[[noreturn]] void config_mismatch(const char* name, const std::string& what, int64_t got,
                                  const char* field, int64_t want) {
  invalid(name, what + " " + std::to_string(got) + " differs from config." + field + " = " +
                    std::to_string(want));
}

// RaggedPrefill::run: each tensor against the config the object was built for, before the
// tensors are compared with each other, so that a wrong tensor is reported as itself (a q with
// 15 heads for a 16/16 config names q and config.num_qo_heads, a v with head dim 192 names v
// and config.head_dim_vo, not the out that was sized from the config).
void check_against_config(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const TensorView* lse, const PrefillConfig& c) {
  if (q.dtype != c.dtype) {
    mismatch("q", std::string("dtype ") + dtype_name(q.dtype) + " differs from config.dtype " +
                      dtype_name(c.dtype));
  }
  if (out.dtype != output_dtype(c)) {
    mismatch("out", std::string("dtype ") + dtype_name(out.dtype) + " differs from the output dtype " +
                        dtype_name(output_dtype(c)) +
                        (is_fp8(c.dtype) ? " (config.out_dtype)" : " (the input dtype, config.dtype)"));
  }
  if (q.device != c.device) {
    mismatch("q", "is on " + to_string(q.device) + " but config.device is " + to_string(c.device));
  }
  if (q.shape[1] != c.num_qo_heads) config_mismatch("q", "number of heads", q.shape[1], "num_qo_heads", c.num_qo_heads);
  if (q.shape[2] != c.head_dim_qk) config_mismatch("q", "head dim", q.shape[2], "head_dim_qk", c.head_dim_qk);
  if (k.shape[1] != c.num_kv_heads) config_mismatch("k", "number of heads", k.shape[1], "num_kv_heads", c.num_kv_heads);
  if (k.shape[2] != c.head_dim_qk) config_mismatch("k", "head dim", k.shape[2], "head_dim_qk", c.head_dim_qk);
  if (v.shape[1] != c.num_kv_heads) config_mismatch("v", "number of heads", v.shape[1], "num_kv_heads", c.num_kv_heads);
  if (v.shape[2] != c.head_dim_vo) config_mismatch("v", "head dim", v.shape[2], "head_dim_vo", c.head_dim_vo);
  if (out.shape[1] != c.num_qo_heads) config_mismatch("out", "number of heads", out.shape[1], "num_qo_heads", c.num_qo_heads);
  if (out.shape[2] != c.head_dim_vo) config_mismatch("out", "head dim", out.shape[2], "head_dim_vo", c.head_dim_vo);
  if (lse && lse->shape[1] != c.num_qo_heads) {
    config_mismatch("lse", "number of heads", lse->shape[1], "num_qo_heads", c.num_qo_heads);
  }
}

// Tensors may hold more rows than the plan's tokens (capacity-sized buffers, as engines
// capture CUDA graphs over): only rows [0, total) are read or written.
void check_rows(const TensorView& t, const char* name, int64_t total, const char* indptr) {
  if (t.shape[0] < total) {
    invalid(name, "has " + std::to_string(t.shape[0]) + " rows, fewer than the " +
                      std::to_string(total) + " tokens " + indptr + " totals");
  }
}

}  // namespace

void validate_prefill_tensors(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const TensorView* lse,
                              const IndptrTotals& totals, const TensorRules& rules) {
  check_layout(q, "q", 3);
  check_layout(k, "k", 3);
  check_layout(v, "v", 3);
  check_layout(out, "out", 3);
  // lse holds one float per (token, head): any layout works, [T, H] or a [H, T] buffer seen
  // through a transposed view, as long as no two elements share an address.
  if (lse) check_layout(*lse, "lse", 2, /*any_last_stride=*/true);
  check_no_overlap(out, "out");
  if (lse) check_no_overlap(*lse, "lse");

  // dtypes
  const bool wide = rules.allow_fp32_fp64_inputs;
  const bool q_ok = is_half(q.dtype) || is_fp8(q.dtype) || (wide && is_wide(q.dtype));
  if (!q_ok) {
    mismatch("q", std::string("dtype ") + dtype_name(q.dtype) + " is not supported (" + supported_inputs(wide) + ")");
  }
  if (k.dtype != q.dtype) {
    mismatch("k", std::string("dtype ") + dtype_name(k.dtype) + " differs from q's " + dtype_name(q.dtype) + " (" +
                      supported_inputs(wide) + ")");
  }
  if (v.dtype != q.dtype) {
    mismatch("v", std::string("dtype ") + dtype_name(v.dtype) + " differs from q's " + dtype_name(q.dtype) + " (" +
                      supported_inputs(wide) + ")");
  }
  if (rules.out_matches_input_dtype) {
    if (is_fp8(q.dtype)) {
      if (!is_half(out.dtype)) {
        mismatch("out", std::string("dtype ") + dtype_name(out.dtype) + " is not an output dtype of e4m3 inputs (bf16 or fp16)");
      }
    } else if (out.dtype != q.dtype) {
      mismatch("out", std::string("dtype ") + dtype_name(out.dtype) + " must equal the input dtype " + dtype_name(q.dtype));
    }
  } else if (!is_wide(out.dtype)) {
    mismatch("out", std::string("dtype ") + dtype_name(out.dtype) + " must be fp32 or fp64");
  }
  if (lse) {
    const bool lse_ok = lse->dtype == DType::kFP32 ||
                        (!rules.out_matches_input_dtype && lse->dtype == DType::kFP64);
    if (!lse_ok) mismatch("lse", std::string("dtype ") + dtype_name(lse->dtype) + " must be fp32");
  }

  // devices
  check_same_device(k, "k", q);
  check_same_device(v, "v", q);
  check_same_device(out, "out", q);
  if (lse) check_same_device(*lse, "lse", q);

  if (rules.config) check_against_config(q, k, v, out, lse, *rules.config);

  // shapes
  const int64_t H = q.shape[1], Dqk = q.shape[2];
  const int64_t Hkv = k.shape[1], Dvo = v.shape[2];
  if (H <= 0) invalid("q", "number of heads must be > 0: " + q.describe());
  if (Dqk <= 0) invalid("q", "head dim must be > 0: " + q.describe());
  if (Hkv <= 0) invalid("k", "number of heads must be > 0: " + k.describe());
  if (v.shape[1] != Hkv) {
    invalid("v", "has " + std::to_string(v.shape[1]) + " heads but k has " + std::to_string(Hkv));
  }
  if (H % Hkv != 0) {
    invalid("q", "number of q heads (" + std::to_string(H) + ") must be a multiple of kv heads (" +
                     std::to_string(Hkv) + ")");
  }
  if (k.shape[2] != Dqk) {
    invalid("k", "head dim " + std::to_string(k.shape[2]) + " differs from q's " + std::to_string(Dqk));
  }
  if (Dvo <= 0) invalid("v", "head dim must be > 0: " + v.describe());
  check_rows(q, "q", totals.total_q, "qo_indptr");
  check_rows(k, "k", totals.total_kv, "kv_indptr");
  check_rows(v, "v", totals.total_kv, "kv_indptr");
  if (out.shape[1] != H || out.shape[2] != Dvo) {
    invalid("out", "shape " + shape_str(out) + " must be [rows, " + std::to_string(H) + ", " +
                       std::to_string(Dvo) + "] (q's heads, v's head dim)");
  }
  check_rows(out, "out", totals.total_q, "qo_indptr");
  if (lse && lse->shape[1] != H) {
    invalid("lse", "shape " + shape_str(*lse) + " must be [rows, " + std::to_string(H) + "] (q's heads)");
  }
  if (lse) check_rows(*lse, "lse", totals.total_q, "qo_indptr");

  if (rules.need_16B_alignment) {
    check_16B(q, "q");
    check_16B(k, "k");
    check_16B(v, "v");
    check_16B(out, "out");
  }
}

void validate_merge_tensors(const TensorView& out_a, const TensorView& lse_a,
                            const TensorView& out_b, const TensorView& lse_b,
                            const TensorView& out, const TensorView* lse_out, bool allow_fp64) {
  // LSE tensors may have any strides ([N, H], or a [H, N] buffer through a transposed view).
  check_layout(out_a, "out_a", 3);
  check_layout(lse_a, "lse_a", 2, /*any_last_stride=*/true);
  check_layout(out_b, "out_b", 3);
  check_layout(lse_b, "lse_b", 2, /*any_last_stride=*/true);
  check_layout(out, "out", 3);
  if (lse_out) check_layout(*lse_out, "lse_out", 2, /*any_last_stride=*/true);
  check_no_overlap(out, "out");
  if (lse_out) check_no_overlap(*lse_out, "lse_out");

  const DType t = out_a.dtype;
  const bool a_ok = is_half(t) || t == DType::kFP32 || (allow_fp64 && t == DType::kFP64);
  if (!a_ok) mismatch("out_a", std::string("dtype ") + dtype_name(t) + " is not supported");
  if (out_b.dtype != t) mismatch("out_b", std::string("dtype ") + dtype_name(out_b.dtype) + " differs from out_a's " + dtype_name(t));
  const bool out_ok = allow_fp64 ? (is_half(out.dtype) || is_wide(out.dtype)) : out.dtype == t;
  if (!out_ok) mismatch("out", std::string("dtype ") + dtype_name(out.dtype) + " differs from out_a's " + dtype_name(t));
  auto lse_dtype = [&](const TensorView& l, const char* name) {
    if (!(l.dtype == DType::kFP32 || (allow_fp64 && l.dtype == DType::kFP64))) {
      mismatch(name, std::string("dtype ") + dtype_name(l.dtype) + " must be fp32");
    }
  };
  lse_dtype(lse_a, "lse_a");
  lse_dtype(lse_b, "lse_b");
  if (lse_out) lse_dtype(*lse_out, "lse_out");

  auto same_dev = [&](const TensorView& x, const char* name) {
    if (x.device != out_a.device) {
      mismatch(name, "is on " + to_string(x.device) + " but out_a is on " + to_string(out_a.device));
    }
  };
  same_dev(lse_a, "lse_a");
  same_dev(out_b, "out_b");
  same_dev(lse_b, "lse_b");
  same_dev(out, "out");
  if (lse_out) same_dev(*lse_out, "lse_out");

  const int64_t N = out_a.shape[0], H = out_a.shape[1], D = out_a.shape[2];
  auto same3 = [&](const TensorView& x, const char* name) {
    if (x.shape[0] != N || x.shape[1] != H || x.shape[2] != D) {
      invalid(name, "shape " + shape_str(x) + " differs from out_a's " + shape_str(out_a));
    }
  };
  auto lse2 = [&](const TensorView& x, const char* name) {
    if (x.shape[0] != N || x.shape[1] != H) {
      invalid(name, "shape " + shape_str(x) + " must be [" + std::to_string(N) + ", " + std::to_string(H) + "]");
    }
  };
  lse2(lse_a, "lse_a");
  same3(out_b, "out_b");
  lse2(lse_b, "lse_b");
  same3(out, "out");
  if (lse_out) lse2(*lse_out, "lse_out");
}

DType output_dtype(const PrefillConfig& c) { return is_fp8(c.dtype) ? c.out_dtype : c.dtype; }

bool has_descales(const Descales& d) { return d.q != nullptr || d.k != nullptr || d.v != nullptr; }

void validate_descales(const Descales& d, DType input, Device device, int64_t batch_size, int64_t kv_heads) {
  const TensorView* views[3] = {d.q, d.k, d.v};
  const char* names[3] = {"q_descale", "k_descale", "v_descale"};
  for (int i = 0; i < 3; ++i) {
    const TensorView* t = views[i];
    if (t == nullptr) continue;
    const char* name = names[i];
    if (!is_fp8(input)) {
      mismatch(name, std::string("descale factors apply to e4m3 inputs only; the inputs are ") + dtype_name(input));
    }
    check_layout(*t, name, 2, /*any_last_stride=*/true);
    if (t->dtype != DType::kFP32) mismatch(name, std::string("dtype ") + dtype_name(t->dtype) + " must be fp32");
    if (t->device != device) {
      mismatch(name, "is on " + to_string(t->device) + " but q is on " + to_string(device));
    }
    if (t->shape[0] < batch_size || t->shape[1] != kv_heads) {
      invalid(name, "shape " + shape_str(*t) + " must be [>= batch_size, num_kv_heads] = [>= " +
                        std::to_string(batch_size) + ", " + std::to_string(kv_heads) + "]");
    }
  }
}

void require_device(const TensorView& t, const char* name, Device expected) {
  if (t.device != expected) {
    mismatch(name, "must be on " + to_string(expected) + ", got " + to_string(t.device));
  }
}

}  // namespace plan
}  // namespace mlakit
