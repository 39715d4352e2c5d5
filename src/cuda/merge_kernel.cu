// merge_states on the GPU: elementwise over [N, H, D], memory bound.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/pdl_launch.h"
#include "contract/prefill_launch.h"

namespace mlakit {
namespace cuda {
namespace {

template <typename T>
__device__ __forceinline__ float to_f(T x) { return static_cast<float>(x); }
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

// One warp per (token, head) row: every lane reads the row's two lse values before lane 0
// rewrites lse_out, so lse_out (and out) may alias the inputs.
template <typename T>
__global__ void merge_kernel(const MergeArgs a) {
  // PDL (docs/sm90-kernel.md): both partial results are usually the previous kernel's outputs.
  pdl_wait();
  // The next kernel's blocks may be scheduled as these retire (they wait for this grid).
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t rows = a.n * a.h;
  const int64_t warps_total = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
       row < rows; row += warps_total) {
    const int64_t h = row % a.h;
    const int64_t n = row / a.h;
    // +inf is FlashAttention-2's lse for a row with no key: empty, like -inf.
    const float la_raw = a.lse_a[n * a.la_stride_tok + h * a.la_stride_head];
    const float lb_raw = a.lse_b[n * a.lb_stride_tok + h * a.lb_stride_head];
    const float la = isinf(la_raw) ? -INFINITY : la_raw;
    const float lb = isinf(lb_raw) ? -INFINITY : lb_raw;
    const T* pa = static_cast<const T*>(a.out_a) + n * a.oa_stride_tok + h * a.oa_stride_head;
    const T* pb = static_cast<const T*>(a.out_b) + n * a.ob_stride_tok + h * a.ob_stride_head;
    T* po = static_cast<T*>(a.out) + n * a.o_stride_tok + h * a.o_stride_head;
    const bool a_empty = la == -INFINITY, b_empty = lb == -INFINITY;
    const float m = fmaxf(la, lb);
    const float wa = a_empty ? 0.f : expf(la - m);
    const float wb = b_empty ? 0.f : expf(lb - m);
    const float inv = 1.f / (wa + wb);
    for (int64_t d = lane; d < a.d; d += 32) {
      const T va = pa[d], vb = pb[d];
      // -inf on one side passes the other through unchanged (bit for bit).
      if (a_empty && b_empty) po[d] = from_f<T>(0.f);
      else if (b_empty) po[d] = va;
      else if (a_empty) po[d] = vb;
      else po[d] = from_f<T>((to_f(va) * wa + to_f(vb) * wb) * inv);
    }
    __syncwarp();
    if (a.lse_out != nullptr && lane == 0) {
      a.lse_out[n * a.lo_stride_tok + h * a.lo_stride_head] =
          (a_empty && b_empty) ? -INFINITY : (b_empty ? la : (a_empty ? lb : m + logf(wa + wb)));
    }
  }
}

}  // namespace

void launch_merge(DType dtype, const MergeArgs& args, Stream stream) {
  const int64_t rows = args.n * args.h;
  if (rows == 0 || args.d == 0) return;
  const int threads = 256;  // 8 rows per block
  const int64_t want = (rows + 7) / 8;
  const int blocks = static_cast<int>(want < 65535 * 16 ? want : 65535 * 16);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::kBF16: launch_kernel(merge_kernel<__nv_bfloat16>, blocks, threads, 0, s, args); break;
    case DType::kFP16: launch_kernel(merge_kernel<__half>, blocks, threads, 0, s, args); break;
    case DType::kFP32: launch_kernel(merge_kernel<float>, blocks, threads, 0, s, args); break;
    default:
      throw Error(ErrorKind::kTypeMismatch, "out_a",
                  std::string("merge_states needs bf16, fp16 or fp32, got ") + dtype_name(dtype));
  }
}

}  // namespace cuda
}  // namespace mlakit
