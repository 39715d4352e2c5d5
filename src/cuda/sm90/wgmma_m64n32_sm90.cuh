// wgmma m64n32k16 with both operands in shared memory (K-major), the product the latent kernel
// issues for its 32-key halves of S; beside ptx_sm90.cuh's m64n128 forms, in its own header so
// the prefill kernels' translation units do not depend on it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace mlakit {
namespace cuda {
namespace sm90 {

// D[64x32] (+)= A[64x16] * B[16x32]: A and B (as its [32 x 16] transpose, rows = keys) K-major in
// 128-byte-swizzled shared memory. accumulate = 0 overwrites D. Per warp, lane l holds
// d[4n + e]: row 16 (warp % 4) + l / 4 (+ 8 for e >= 2), column 8n + 2 (l % 4) + (e & 1).
template <typename T>
__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int accumulate);

#define MLAKIT_WGMMA_N32_SS(ptx_type)                                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                    \
               "wgmma.mma_async.sync.aligned.m64n32k16.f32." ptx_type "." ptx_type " "                         \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),         \
                 "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),      \
                 "+f"(d[14]), "+f"(d[15])                                                                      \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))

template <>
__device__ __forceinline__ void wgmma_m64n32k16_ss<__nv_bfloat16>(float (&d)[16], uint64_t desc_a, uint64_t desc_b,
                                                                  int accumulate) {
  MLAKIT_WGMMA_N32_SS("bf16");
}
template <>
__device__ __forceinline__ void wgmma_m64n32k16_ss<__half>(float (&d)[16], uint64_t desc_a, uint64_t desc_b,
                                                           int accumulate) {
  MLAKIT_WGMMA_N32_SS("f16");
}

#undef MLAKIT_WGMMA_N32_SS

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
