// Latent attention on CUDA: whether the device has the kernel, and one run = the Hopper kernel
// over the plan's work items (sm90/latent_kernel_sm90.cuh), then the merge of split rows
// (below; L = 512: a warp's 32 lanes x 16 columns). Both grids are fixed per device, and every
// count they loop over is read from the plan block on the device, so a captured run replays
// after re-planning.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "contract/latent_launch.h"
#include "contract/latent_layout.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_guard.h"
#include "cuda/common/ptx.cuh"
#include "cuda/latent_decode_rows.h"
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

constexpr int kMergeWarps = 8;  // rows of a merge in parallel; a warp takes a row
static_assert(latent::kMaxSplits <= 32, "a lane holds one split's weight");

// Four floats x mul as four 16-bit values (8 bytes) at dst.
template <typename T>
__device__ __forceinline__ void store4(T* dst, float4 v, float mul) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack2<T>(v.x * mul, v.y * mul), pack2<T>(v.z * mul, v.w * mul));
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, d));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) x += __shfl_xor_sync(0xffffffffu, x, d);
  return x;
}

// Each merge's rows, a warp a row: lane s holds split s's lse and max logit; the weights
// exp(lse_s - max lse) and their sum come from fixed-order warp reductions, then each lane adds
// its 16 columns over the splits in split order (the same formula as the CPU backend's,
// src/cpu/latent_run.cc, in another order of additions), then the sink, written as a final row.
// Every split's loads are independent, so a row costs about one memory round trip.
template <typename T>
__global__ void __launch_bounds__(kMergeWarps * 32) latent_merge_kernel(const LatentArgs a) {
  const auto* block = static_cast<const uint8_t*>(a.plan);
  const auto* h = reinterpret_cast<const LatentHeader*>(block);
  const auto* merges = reinterpret_cast<const LatentMerge*>(block + h->merges_offset);
  const int L = a.kv_lora_rank, H = a.num_heads;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int m = blockIdx.x; m < h->num_merges; m += gridDim.x) {
    const LatentMerge mg = merges[m];
    for (int i = warp; i < mg.rows; i += kMergeWarps) {
      const int64_t p_lane = mg.partial + static_cast<int64_t>(lane) * mg.rows + i;
      const bool has = lane < mg.splits;
      const float lse_s = has ? a.partial_lse[p_lane] : -INFINITY;
      const float mx = warp_max(has ? a.partial_max[p_lane] : -INFINITY);
      const float mx_lse = warp_max(lse_s);
      const float w = mx_lse > -INFINITY ? expf(lse_s - mx_lse) : 0.f;  // 0 for an empty split
      const float sum = warp_sum(w);
      float4 acc[4] = {};
      for (int s = 0; s < mg.splits; ++s) {
        const float ws = __shfl_sync(0xffffffffu, w, s);
        if (ws == 0.f) continue;
        const float* src = a.partial_out + (mg.partial + static_cast<int64_t>(s) * mg.rows + i) * L;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float4 v = *reinterpret_cast<const float4*>(src + 128 * k + 4 * lane);
          acc[k].x += ws * v.x;
          acc[k].y += ws * v.y;
          acc[k].z += ws * v.z;
          acc[k].w += ws * v.w;
        }
      }
      const int64_t g = mg.row_begin + i, t = g / H, hd = g % H;
      float lse = -INFINITY, mul = 0.f;
      if (sum > 0.f) {
        lse = mx_lse + logf(sum);
        mul = 1.f / sum;
        if (a.attn_sink != nullptr) mul /= 1.f + expf(a.attn_sink[hd * a.sink_stride] - lse);
      }
      T* dst = static_cast<T*>(a.out) + t * a.out_stride_tok + hd * a.out_stride_head;
#pragma unroll
      for (int k = 0; k < 4; ++k) store4<T>(dst + 128 * k + 4 * lane, acc[k], mul);
      if (lane == 0) {
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

int latent_grid(int device) {
  int sms = 0;
  MLAKIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

#if MLAKIT_WITH_SM90
namespace {
// The kernel on FP8 rows (fp8_ds_mla or fp8). At 128 heads a plan's items come in pairs over the
// same keys (latent::paired_items at the kernel's rows an item). On fp8_ds_mla rows a pair runs
// on a cluster of two CTAs that decode each key tile once for both (3-6% faster at 128 heads on
// the H100: decode, MTP-2, sparse decode); the unpaired kernel where no cluster fits. fp8 rows
// (one scale a layer) decode cheaply enough that pairing lost there (7% slower dense decode).
void launch_fp8_rows(const LatentArgs& a, int device, int sms, cudaStream_t s) {
  if (a.cache_format == 2) {
    MLAKIT_CUDA_CHECK(sm90::launch_latent_bf16_fp8(a, device, sms, s));
    return;
  }
  if (latent::paired_items(a.num_heads, latent::kCudaBlockRows)) {
    const cudaError_t e = sm90::launch_latent_bf16_fp8ds_pair(a, device, sms, s);
    if (e != cudaErrorNotSupported) {
      MLAKIT_CUDA_CHECK(e);
      return;
    }
  }
  MLAKIT_CUDA_CHECK(sm90::launch_latent_bf16_fp8ds(a, device, sms, s));
}
}  // namespace
#endif

void launch_latent(const LatentArgs& a, int device, Stream stream) {
  DeviceGuard guard(device);
  auto* s = static_cast<cudaStream_t>(stream);
  const int sms = latent_grid(device);
#if MLAKIT_WITH_SM90
  if (a.cache_format != 0 && a.decoded != nullptr) {
    // An FP8 cache with a workspace to decode into once: the decode and the 16-bit kernel over
    // the workspace serve decoded plans, the FP8 kernel the others; each kernel reads from the
    // plan block whether it has the plan's items, so one captured run replays either kind.
    launch_latent_decode_rows(a, sms, s);
    LatentArgs w = a;
    w.cache = a.decoded;
    w.cache_format = 0;
    w.k_scale = nullptr;
    w.block_size = latent::kDecodedBlockRows;
    w.cache_stride_row = a.kv_lora_rank + a.rope_dim;
    w.cache_stride_block = int64_t{latent::kDecodedBlockRows} * w.cache_stride_row;
    w.num_slots = a.decoded_capacity;
    w.run_when = 1;
    MLAKIT_CUDA_CHECK(sm90::launch_latent_bf16(w, device, sms, s));
    LatentArgs f = a;
    f.run_when = 2;
    launch_fp8_rows(f, device, sms, s);
  } else if (a.cache_format != 0) {  // FP8 rows (bf16 only)
    launch_fp8_rows(a, device, sms, s);
  } else if (a.dtype == DType::kBF16) {
    MLAKIT_CUDA_CHECK(sm90::launch_latent_bf16(a, device, sms, s));
  } else {
    MLAKIT_CUDA_CHECK(sm90::launch_latent_fp16(a, device, sms, s));
  }
#else
  throw Error(ErrorKind::kUnsupported, "config.device", "this build has no Hopper kernels");
#endif
  // Merges are few (one per split row block of a request): two CTAs per SM cover a batch of 128
  // requests at 128 heads (two row blocks each) in one wave.
  if (a.dtype == DType::kBF16) {
    latent_merge_kernel<__nv_bfloat16><<<2 * sms, kMergeWarps * 32, 0, s>>>(a);
  } else {
    latent_merge_kernel<__half><<<2 * sms, kMergeWarps * 32, 0, s>>>(a);
  }
  MLAKIT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cuda
}  // namespace mlakit
