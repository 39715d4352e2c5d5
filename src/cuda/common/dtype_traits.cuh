// The CUDA element type behind each 16-bit DType, and back.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "mlakit/tensor.h"

namespace mlakit {
namespace cuda {

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<__nv_bfloat16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<__half> {
  static constexpr DType value = DType::kFP16;
};

// Tag used in kernel_list.h -> element type.
#define MLAKIT_ELEM_bf16 __nv_bfloat16
#define MLAKIT_ELEM_fp16 __half

}  // namespace cuda
}  // namespace mlakit
