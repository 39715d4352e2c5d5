// Validation of split-K attention tensors: K given as a per-head part k [T_kv, Hkv, Dqk - R]
// and a RoPE part k_rope shared by all heads ([T_kv, R], or [T_kv, 1 or Hkv, R]; a head stride
// of 0 broadcasts). Every error names one argument; nothing is written by validation.
#pragma once

#include "mlakit/tensor.h"
#include "plan/validate.h"

namespace mlakit {
namespace plan {

// Checks q, k, k_rope, v, out, lse for a batch with these totals; returns k_rope as a 3-D view
// [T_kv, 1 or Hkv, R] (a 2-D k_rope becomes [T_kv, 1, R]).
TensorView validate_split_k_tensors(const TensorView& q, const TensorView& k,
                                    const TensorView& k_rope, const TensorView& v,
                                    const TensorView& out, const TensorView* lse,
                                    const IndptrTotals& totals, const TensorRules& rules);

}  // namespace plan
}  // namespace mlakit
