// The float64 reference: simple, single-threaded, obviously right. Tests compare every backend
// against it. Inputs are host tensors of any floating dtype (bf16, fp16, fp32, fp64, e4m3; q, k
// and v of one dtype) with the shapes and semantics of mlakit/prefill.h; out is a host fp32 or
// fp64 tensor [total_q, H, Dvo], lse (optional) a host fp32 or fp64 tensor [total_q, H]. Every
// e4m3 value is decoded exactly; descale factors (mlakit/prefill.h, Descales; host tensors, e4m3
// inputs only) multiply the decoded inputs of their (sequence, kv head).
#pragma once

#include <cstdint>

#include "mlakit/prefill.h"
#include "mlakit/tensor.h"

namespace mlakit {
namespace reference {

void ragged_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                    const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                    const PrefillOptions& options, const TensorView& out,
                    const TensorView* lse = nullptr);
void ragged_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                    const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                    const PrefillOptions& options, const TensorView& out, const TensorView* lse,
                    const Descales& descales);

// One output row: query row `q_row` (global index into q) of q head `head`, in float64.
// out_row receives Dvo values; *lse_out (if non-null) the natural-log LSE (-inf if no key).
// ragged_prefill is this, for every row. Tools use it to check sampled rows of large problems.
void attention_row(const TensorView& q, const TensorView& k, const TensorView& v,
                   const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                   const PrefillOptions& options, int64_t q_row, int head, double* out_row,
                   double* lse_out);
void attention_row(const TensorView& q, const TensorView& k, const TensorView& v,
                   const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                   const PrefillOptions& options, int64_t q_row, int head, double* out_row,
                   double* lse_out, const Descales& descales);

// Same formula as mlakit::merge_states, in float64, on host tensors.
void merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                  const TensorView& lse_b, const TensorView& out, const TensorView* lse_out);

}  // namespace reference
}  // namespace mlakit
