// The gather on an FP8 latent cache (mla_ops.h; formats in mlakit/mla.h, KvCacheDtype): context
// rows decoded from the cache into the 16-bit latent rows the up-projection reads, new tokens
// encoded into their slots and handed on as the cache now holds them, padding rows zeroed; one
// pass, as the 16-bit gather (gather.cu). One warp per row: 16 codes (16 bytes) a lane, so a
// kFp8 row of 576 codes is 36 loads and a fp8_ds_mla row's 512 codes one load per lane (its
// 128-value tiles are 8 lanes each, whose largest |x| a new token's scale needs: three shuffles),
// its scales one 16-byte piece and its bf16 k_pe eight. The bytes equal the host codec's
// (kv_cache_codec.cc); the gather tests compare them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda/common/fp8_rows.cuh"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/pdl_launch.h"
#include "mla/cuda/mla_launch.h"
#include "mla/cuda/row_copy.cuh"
#include "contract/kv_cache_format.h"

namespace mlakit {
namespace cuda {
namespace mla {
namespace {

using mlakit::KvCacheDtype;
using mlakit::mla::is_new_token_entry;
using mlakit::mla::new_token_of;

using fp8::context_row_ds_mla;
using fp8::context_row_fp8;
using fp8::store_decoded16;

constexpr int kWarpsPerBlock = kRowCopyThreads / 32;
constexpr unsigned kFullWarp = 0xffffffffu;

template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t w);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t w) {
  return __half22float2(*reinterpret_cast<const __half2*>(&w));
}

// Two floats as e4m3 codes (the first in the low byte): nearest even, saturated to +-448, NaN ->
// 0x7f (the host codec's e4m3_satfinite).
__device__ __forceinline__ uint32_t float2_to_e4m3x2(float a, float b) {
  uint32_t r = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  if (a != a) r = (r & 0xff00u) | 0x7fu;
  if (b != b) r = (r & 0x00ffu) | 0x7f00u;
  return r;
}

// 16 values of T (two 16-byte loads) as floats.
template <typename T>
__device__ __forceinline__ void load16_values(const uint16_t* src, float (&f)[16]) {
  const uint4 a = load16(src), b = load16(src + 8);
  const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 v = unpack2<T>(w[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// 16 floats (already divided by their scale) as 16 codes.
__device__ __forceinline__ uint4 encode16(const float (&f)[16]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = float2_to_e4m3x2(f[4 * i], f[4 * i + 1]) | (float2_to_e4m3x2(f[4 * i + 2], f[4 * i + 3]) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ uint8_t* cache_bytes(const mlakit::mla::CacheView& c, int32_t slot) {
  const int64_t blk = slot / c.block_size, off = slot % c.block_size;
  return static_cast<uint8_t*>(c.data) + blk * c.block_stride + off * c.row_stride;
}

template <typename T>
__device__ __forceinline__ void new_row_fp8(const uint16_t* kv_c, const uint16_t* k_pe, int latent, float k_scale,
                                            int width, uint8_t* row, uint16_t* out, int lane) {
  for (int p = lane; p < width / 16; p += 32) {
    const int x = 16 * p;
    float f[16];
    load16_values<T>(x < latent ? kv_c + x : k_pe + (x - latent), f);
#pragma unroll
    for (int i = 0; i < 16; ++i) f[i] = __fdiv_rn(f[i], k_scale);  // vLLM's x / scale, a true division
    const uint4 codes = encode16(f);
    store16(row + x, codes);
    store_decoded16<T>(out + x, codes, k_scale);
  }
}

// kFp8DsMla (DeepSeek-V3.2), a new token: lane l holds values [16 l, 16 l + 16) of tile l / 8;
// lanes 0-7 also the k_pe piece l (8 bf16 values). Context rows: cuda/common/fp8_rows.cuh.
using mlakit::mla::kDsMlaLatent;
using mlakit::mla::kDsMlaRopeOffset;
using mlakit::mla::kDsMlaScalesOffset;

__device__ __forceinline__ void new_row_ds_mla(const uint16_t* kv_c, const uint16_t* k_pe, uint8_t* row,
                                               uint16_t* out, int lane) {
  float f[16];
  load16_values<__nv_bfloat16>(kv_c + 16 * lane, f);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(f[i]));  // fmaxf drops a NaN, as the host codec
  // The tile's 8 lanes are aligned within the warp: three butterfly steps give each its maximum.
#pragma unroll
  for (int m = 4; m > 0; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullWarp, amax, m));
  const float scale = mlakit::mla::ds_mla_scale(amax);
  const float inv = __frcp_rn(scale);  // exact: scale is a power of two (inf -> 0, as x / inf)
#pragma unroll
  for (int i = 0; i < 16; ++i) f[i] = __fmul_rn(f[i], inv);
  const uint4 codes = encode16(f);
  store16(row + 16 * lane, codes);
  store_decoded16<__nv_bfloat16>(out + 16 * lane, codes, scale);
  const float s1 = __shfl_sync(kFullWarp, scale, 8), s2 = __shfl_sync(kFullWarp, scale, 16),
              s3 = __shfl_sync(kFullWarp, scale, 24);
  if (lane == 0) {
    store16(row + kDsMlaScalesOffset,
            make_uint4(__float_as_uint(scale), __float_as_uint(s1), __float_as_uint(s2), __float_as_uint(s3)));
  }
  if (lane < 8) {
    const uint4 v = load16(k_pe + 8 * lane);
    store16(row + kDsMlaRopeOffset + 16 * lane, v);
    store16(out + kDsMlaLatent + 8 * lane, v);
  }
}

template <KvCacheDtype F, typename T>
__global__ void __launch_bounds__(kRowCopyThreads) gather_fp8_kernel(const mlakit::mla::GatherArgs a) {
  // PDL: as gather.cu (the cache, the map and k_scale may come from the previous kernel).
  pdl_wait();
  pdl_launch_dependents();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const int64_t count = min(static_cast<int64_t>(*a.count), a.rows);
  const int width = a.cache.width;
  const float k_scale = F == KvCacheDtype::kFp8 ? *a.cache.k_scale : 1.0f;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); r < a.rows; r += warps) {
    uint16_t* out = static_cast<uint16_t*>(a.out) + r * a.out_stride;
    if (r >= count) {
      for (int p = lane; p < width / 8; p += 32) store16(out + 8 * p, make_uint4(0, 0, 0, 0));
      continue;
    }
    const int32_t e = a.map[r];  // one row per warp: every branch below is warp-uniform
    if (!is_new_token_entry(e)) {
      const uint8_t* row = cache_bytes(a.cache, e);
      if constexpr (F == KvCacheDtype::kFp8) context_row_fp8<T>(row, k_scale, width, out, lane);
      else context_row_ds_mla(row, out, lane);
      continue;
    }
    const int64_t t = new_token_of(e);
    const uint16_t* kv_c = static_cast<const uint16_t*>(a.fresh.kv_c) + t * a.fresh.kv_c_stride;
    const uint16_t* k_pe = static_cast<const uint16_t*>(a.fresh.k_pe) + t * a.fresh.k_pe_stride;
    uint8_t* row = cache_bytes(a.cache, a.fresh.slots[t]);
    if constexpr (F == KvCacheDtype::kFp8) new_row_fp8<T>(kv_c, k_pe, a.fresh.latent_dim, k_scale, width, row, out, lane);
    else new_row_ds_mla(kv_c, k_pe, row, out, lane);
  }
}

template <KvCacheDtype F, typename T>
void launch(const mlakit::mla::GatherArgs& a, Stream stream) {
  const int64_t blocks = (a.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  launch_kernel(gather_fp8_kernel<F, T>, static_cast<int>(blocks < kRowCopyMaxBlocks ? blocks : kRowCopyMaxBlocks),
                kRowCopyThreads, 0, static_cast<cudaStream_t>(stream), a);
}

}  // namespace

void launch_gather_fp8(const mlakit::mla::GatherArgs& a, Stream stream) {
  if (a.rows <= 0) return;
  // check_config allows fp8_ds_mla with bf16 only.
  if (a.cache.format == KvCacheDtype::kFp8DsMla) launch<KvCacheDtype::kFp8DsMla, __nv_bfloat16>(a, stream);
  else if (a.dtype == DType::kBF16) launch<KvCacheDtype::kFp8, __nv_bfloat16>(a, stream);
  else launch<KvCacheDtype::kFp8, __half>(a, stream);
}

}  // namespace mla
}  // namespace cuda
}  // namespace mlakit
