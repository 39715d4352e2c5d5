// The layout checks every tensor argument goes through (plan/validate.cc), shared by the API
// objects' validators. Each throws mlakit::Error (kInvalidArgument) naming `name`.
#pragma once

#include <string>

#include "mlakit/kv_cache.h"
#include "mlakit/tensor.h"

namespace mlakit {
namespace plan {

// Rank, null data, non-negative sizes and strides, natural element alignment and, unless
// `any_last_stride` (a scalar-per-row tensor such as lse), a unit last stride.
void check_layout(const TensorView& t, const char* name, int ndim, bool any_last_stride = false);
// An output written by several threads: no two elements at one address.
void check_no_overlap(const TensorView& t, const char* name);
// 16-byte aligned data and row steps (CUDA's vector loads).
void check_16B(const TensorView& t, const char* name);
// A tensor's sizes as "[a, b, c]", for the validators' messages.
std::string shape_str(const TensorView& t);
// The layer scale of an fp8 latent cache (KvCacheDtype::kFp8, vLLM's layer._k_scale): one
// float32 element on `device`; null (or no data) for every other format. `owner` names the
// object in the messages ("step", "object"). Throws naming "k_scale".
void check_cache_scale(const TensorView* scale, KvCacheDtype format, Device device, const char* owner);

}  // namespace plan
}  // namespace mlakit
