// The CUDA element type behind each kernel DType (bf16, fp16, e4m3), and back.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

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
template <>
struct DTypeOf<__nv_fp8_e4m3> {
  static constexpr DType value = DType::kE4M3;
};

// Tag used in kernel_list.h -> input element type, and output element type (16-bit inputs write
// their own; e4m3 -> bf16).
#define MLAKIT_ELEM_bf16 __nv_bfloat16
#define MLAKIT_ELEM_fp16 __half
#define MLAKIT_ELEM_e4m3 __nv_fp8_e4m3
#define MLAKIT_OUT_bf16 __nv_bfloat16
#define MLAKIT_OUT_fp16 __half
#define MLAKIT_OUT_e4m3 __nv_bfloat16

}  // namespace cuda
}  // namespace mlakit
