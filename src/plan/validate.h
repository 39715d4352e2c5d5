// Argument validation shared by every backend and the reference. Each check throws
// mlakit::Error naming the argument; nothing is written before all checks pass.
#pragma once

#include <cstdint>

#include "mlakit/prefill.h"
#include "mlakit/tensor.h"

namespace mlakit {
namespace plan {

// Totals implied by the indptr arrays.
struct IndptrTotals {
  int64_t total_q = 0;
  int64_t total_kv = 0;
  int64_t max_q_len = 0;
  int64_t max_kv_len = 0;
};

// qo_indptr / kv_indptr: non-null, batch_size >= 0, [0] == 0, monotone (non-decreasing).
IndptrTotals validate_indptr(const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size);

void validate_options(const PrefillOptions& options);

// Shapes/dtypes/devices/strides of q, k, v, out, lse for a problem with these totals and heads.
// Row counts may exceed the totals (capacity-sized buffers): q/out/lse rows >= total_q, k/v rows
// >= total_kv. lse may have any non-overlapping strides ([T, H] or [H, T] memory).
// `out_matches_input_dtype`: true for backends (out in the input dtype; for e4m3 inputs bf16 or
// fp16, config->out_dtype when a config is given), false for the reference (out fp32/fp64).
// `need_16B_alignment`: 16-byte aligned pointers and strides (CUDA).
// `config`: RaggedPrefill::run's config; each tensor is checked against it first, so errors
// name the config field a tensor disagrees with.
struct TensorRules {
  bool out_matches_input_dtype = true;
  bool allow_fp32_fp64_inputs = false;  // the reference accepts them
  bool need_16B_alignment = false;
  const PrefillConfig* config = nullptr;
};
void validate_prefill_tensors(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const TensorView* lse,
                              const IndptrTotals& totals, const TensorRules& rules);

// The output dtype a config's run() writes: config.out_dtype for e4m3 inputs, else the inputs'.
DType output_dtype(const PrefillConfig& config);

// Descale factors (mlakit/prefill.h, Descales) for inputs of dtype `input` on `device`: each one
// given must be a float32 [>= batch_size, num_kv_heads] tensor with non-negative strides on
// `device`; only e4m3 inputs take them. Errors name q_descale / k_descale / v_descale.
void validate_descales(const Descales& descales, DType input, Device device, int64_t batch_size,
                       int64_t num_kv_heads);
bool has_descales(const Descales& descales);

// out_a/out_b/out [N,H,D] same dtype (bf16/fp16/fp32) & device; lse_* [N,H] fp32, any strides.
// With allow_fp64 (the reference): fp64 is accepted too, out may be any float dtype, lse fp32/fp64.
void validate_merge_tensors(const TensorView& out_a, const TensorView& lse_a,
                            const TensorView& out_b, const TensorView& lse_b,
                            const TensorView& out, const TensorView* lse_out,
                            bool allow_fp64 /* reference only */);

// kTypeMismatch naming `name` unless t lives on `expected` (e.g. the reference wants host tensors).
void require_device(const TensorView& t, const char* name, Device expected);

}  // namespace plan
}  // namespace mlakit
