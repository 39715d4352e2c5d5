// wgmma m64n64k16 with both operands in shared memory (K-major): the product the latent kernel
// issues for S over a 64-key tile (latent_kernel_sm90.cuh); beside ptx_sm90.cuh's m64n128 forms,
// in its own header so the prefill kernels' translation units do not depend on it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace mlakit {
namespace cuda {
namespace sm90 {

// D[64x64] (+)= A[64x16] * B[16x64]: A and B (as its [64 x 16] transpose, rows = keys) K-major in
// 128-byte-swizzled shared memory. accumulate = 0 overwrites D. Per warp, lane l holds d[4n + e]:
// row 16 (warp % 4) + l / 4 (+ 8 for e >= 2), column 8n + 2 (l % 4) + (e & 1), n = 0..7.
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate);

#define MLAKIT_WGMMA_N64_SS(ptx_type)                                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                 \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." ptx_type "." ptx_type " "                       \
               "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                     \
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "            \
               "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                              \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),       \
                 "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
                 "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
                 "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
                 "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                          \
               : "l"(desc_a), "l"(desc_b), "r"(accumulate))

template <>
__device__ __forceinline__ void wgmma_m64n64k16_ss<__nv_bfloat16>(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                                  int accumulate) {
  MLAKIT_WGMMA_N64_SS("bf16");
}
template <>
__device__ __forceinline__ void wgmma_m64n64k16_ss<__half>(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                           int accumulate) {
  MLAKIT_WGMMA_N64_SS("f16");
}

#undef MLAKIT_WGMMA_N64_SS

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
