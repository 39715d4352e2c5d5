// How the float64 references read their inputs and write their results: any of the float dtypes
// as a double, and results into fp32 or fp64 tensors. Shared by reference.cc (prefill),
// latent_reference.cc and mla/mla_reference.cc.
#pragma once

#include <cstdint>

#include "cpu/half_convert.h"
#include "mlakit/error.h"
#include "mlakit/tensor.h"

namespace mlakit {
namespace reference {

// bf16, fp16, fp32 or fp64 at p, exactly, as a double.
inline double load_real(const void* p, DType t) {
  switch (t) {
    case DType::kBF16: return cpu::bf16_to_float(*static_cast<const uint16_t*>(p));
    case DType::kFP16: return cpu::fp16_to_float(*static_cast<const uint16_t*>(p));
    case DType::kFP32: return *static_cast<const float*>(p);
    case DType::kFP64: return *static_cast<const double*>(p);
    default: throw Error(ErrorKind::kTypeMismatch, "", "reference: not a floating dtype");
  }
}

// x into an fp32 (rounded) or fp64 result.
inline void store_wide(void* p, DType t, double x) {
  if (t == DType::kFP32) *static_cast<float*>(p) = static_cast<float>(x);
  else *static_cast<double*>(p) = x;
}

}  // namespace reference
}  // namespace mlakit
