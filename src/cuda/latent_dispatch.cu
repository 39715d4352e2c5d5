// Latent attention on CUDA: whether the device has the kernel, and one run = the Hopper kernel
// over the plan's work items (sm90/latent_kernel_sm90.cuh), then the merge of split rows
// (below). Both grids are fixed per device, and every count they loop over is read from the plan
// block on the device, so a captured run replays after re-planning.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "contract/latent_launch.h"
#include "contract/latent_layout.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "mlakit/error.h"
#if MLAKIT_WITH_SM90
#include "cuda/sm90/latent_launch_sm90.h"
#endif

namespace mlakit {
namespace cuda {

namespace {

using latent::LatentArgs;
using latent::LatentHeader;
using latent::LatentMerge;

constexpr int kMergeThreads = 128;  // 4 of the 512 columns a thread

template <typename T>
__device__ __forceinline__ void store4(T* dst, const float (&v)[4], float mul);
template <>
__device__ __forceinline__ void store4<__nv_bfloat16>(__nv_bfloat16* dst, const float (&v)[4], float mul) {
  reinterpret_cast<__nv_bfloat162*>(dst)[0] = __floats2bfloat162_rn(v[0] * mul, v[1] * mul);
  reinterpret_cast<__nv_bfloat162*>(dst)[1] = __floats2bfloat162_rn(v[2] * mul, v[3] * mul);
}
template <>
__device__ __forceinline__ void store4<__half>(__half* dst, const float (&v)[4], float mul) {
  reinterpret_cast<__half2*>(dst)[0] = __floats2half2_rn(v[0] * mul, v[1] * mul);
  reinterpret_cast<__half2*>(dst)[1] = __floats2half2_rn(v[2] * mul, v[3] * mul);
}

// Each merge's rows: the splits weighted by exp(lse_s - max lse), added in split order (the CPU
// backend's formula, src/cpu/latent_run.cc), then the sink, written as final rows.
template <typename T>
__global__ void __launch_bounds__(kMergeThreads) latent_merge_kernel(const LatentArgs a) {
  const auto* block = static_cast<const uint8_t*>(a.plan);
  const auto* h = reinterpret_cast<const LatentHeader*>(block);
  const auto* merges = reinterpret_cast<const LatentMerge*>(block + h->merges_offset);
  const int L = a.kv_lora_rank, H = a.num_heads;
  const int c = threadIdx.x * 4;
  for (int m = blockIdx.x; m < h->num_merges; m += gridDim.x) {
    const LatentMerge mg = merges[m];
    for (int i = 0; i < mg.rows; ++i) {
      float mx_lse = -INFINITY, mx = -INFINITY;
      for (int s = 0; s < mg.splits; ++s) {
        const int64_t p = mg.partial + static_cast<int64_t>(s) * mg.rows + i;
        mx_lse = fmaxf(mx_lse, a.partial_lse[p]);
        mx = fmaxf(mx, a.partial_max[p]);
      }
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      float lse = -INFINITY, mul = 0.f;
      if (mx_lse > -INFINITY) {
        float sum = 0.f;
        for (int s = 0; s < mg.splits; ++s) {
          const int64_t p = mg.partial + static_cast<int64_t>(s) * mg.rows + i;
          const float w = expf(a.partial_lse[p] - mx_lse);  // 0 for an empty split
          if (w == 0.f) continue;
          sum += w;
          if (c < L) {
            const float4 v = *reinterpret_cast<const float4*>(a.partial_out + p * L + c);
            acc[0] += w * v.x;
            acc[1] += w * v.y;
            acc[2] += w * v.z;
            acc[3] += w * v.w;
          }
        }
        lse = mx_lse + logf(sum);
        mul = 1.f / sum;
      }
      const int64_t g = mg.row_begin + i, t = g / H, hd = g % H;
      if (a.attn_sink != nullptr && mx_lse > -INFINITY) mul /= 1.f + expf(a.attn_sink[hd * a.sink_stride] - lse);
      if (c < L) store4<T>(static_cast<T*>(a.out) + t * a.out_stride_tok + hd * a.out_stride_head + c, acc, mul);
      if (threadIdx.x == 0) {
        if (a.lse) a.lse[t * a.lse_stride_tok + hd * a.lse_stride_head] = lse;
        if (a.max_logits) a.max_logits[t * a.max_stride_tok + hd * a.max_stride_head] = mx;
      }
    }
  }
}

}  // namespace

bool latent_kernel_available(int device, std::string* why) {
#if MLAKIT_WITH_SM90
  cudaDeviceProp prop{};
  MLAKIT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (prop.major == 9 && prop.minor == 0) return true;
  *why = std::string(prop.name) + " is compute capability " + std::to_string(prop.major) + "." +
         std::to_string(prop.minor) + "; latent attention's kernel runs on Hopper (sm_90)";
  return false;
#else
  (void)device;
  *why = "this build has no Hopper kernels (MLAKIT_CUDA_ARCHS without 90a); latent attention's kernel is one";
  return false;
#endif
}

void launch_latent(const LatentArgs& a, int device, Stream stream) {
  DeviceGuard guard(device);
  auto* s = static_cast<cudaStream_t>(stream);
  int sms = 0;
  MLAKIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
#if MLAKIT_WITH_SM90
  const bool bf16 = a.dtype == DType::kBF16;
  MLAKIT_CUDA_CHECK(bf16 ? sm90::launch_latent_bf16(a, device, sms, s) : sm90::launch_latent_fp16(a, device, sms, s));
#else
  throw Error(ErrorKind::kUnsupported, "config.device", "this build has no Hopper kernels");
#endif
  // Merges are few (one per split row block): two CTAs per SM bound the launch's tail.
  if (a.dtype == DType::kBF16) {
    latent_merge_kernel<__nv_bfloat16><<<2 * sms, kMergeThreads, 0, s>>>(a);
  } else {
    latent_merge_kernel<__half><<<2 * sms, kMergeThreads, 0, s>>>(a);
  }
  MLAKIT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda
}  // namespace mlakit
