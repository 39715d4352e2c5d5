// Merging two partial attentions over disjoint key sets by their log-sum-exp.
//
//   out_a, out_b, out: [N, H, D]   (bf16, fp16 or fp32; all the same dtype)
//   lse_a, lse_b, lse: [N, H]      (float32, natural log)
//
//   lse = log(exp(lse_a) + exp(lse_b));  out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)
//
// -inf on either side is exact: the other side passes through unchanged; both -inf gives
// out = 0, lse = -inf. +inf (what FlashAttention-2 writes for a row with no key) counts as -inf.
// lse tensors may have any strides ([N, H], or [H, N] memory through a transposed view). out may be the same tensor as out_a or out_b (in place), lse_out likewise.
// CPU tensors run on the CPU, CUDA tensors on the given stream.
#pragma once

#include "mlakit/tensor.h"

namespace mlakit {

void merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                  const TensorView& lse_b, const TensorView& out, const TensorView* lse_out = nullptr,
                  Stream stream = nullptr);

}  // namespace mlakit
