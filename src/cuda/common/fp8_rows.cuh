// FP8 latent cache rows decoded into 16-bit rows (formats in contract/kv_cache_format.h): what
// the MLA step's gather (mla/cuda/gather_fp8.cu) and latent attention's decode once
// (cuda/latent_decode_rows.cu) write, one warp a row. Each value is code x scale in float32,
// rounded once to the 16-bit type: the host codec's bytes (kv_cache_codec.cc) and what the Hopper
// latent kernel decodes in its tiles, so every path sees the same values.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "contract/kv_cache_format.h"
#include "cuda/common/load_store16.cuh"

namespace mlakit {
namespace cuda {
namespace fp8 {

// Two floats as a pair of 16-bit values (the first in the low half), rounded to nearest even.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Two e4m3 codes (low byte first) as floats: exact (through fp16, which holds every e4m3 value).
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return __half22float2(__half2(h));
}

// 8 codes (low byte first) x scale as 8 values of T: one 16-byte piece.
template <typename T>
__device__ __forceinline__ uint4 decode8(uint32_t lo4, uint32_t hi4, float scale) {
  const uint32_t c[2] = {lo4, hi4};
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 lo = e4m3x2_to_float2(c[i]), hi = e4m3x2_to_float2(c[i] >> 16);
    o[2 * i] = pack2<T>(__fmul_rn(lo.x, scale), __fmul_rn(lo.y, scale));
    o[2 * i + 1] = pack2<T>(__fmul_rn(hi.x, scale), __fmul_rn(hi.y, scale));
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// 16 codes x scale as 16 values of T: two 16-byte stores at dst.
template <typename T>
__device__ __forceinline__ void store_decoded16(uint16_t* dst, uint4 codes, float scale) {
  store16(dst, decode8<T>(codes.x, codes.y, scale));
  store16(dst + 8, decode8<T>(codes.z, codes.w, scale));
}

// kFp8 (vLLM "fp8"): `width` codes, value = code x k_scale; lane `lane` of the row's warp.
template <typename T>
__device__ __forceinline__ void context_row_fp8(const uint8_t* row, float k_scale, int width, uint16_t* out, int lane) {
  for (int p = lane; p < width / 16; p += 32) store_decoded16<T>(out + 16 * p, load16(row + 16 * p), k_scale);
}

// kFp8 rows of kWidth codes (33 to 64 16-byte pieces: latent attention's 576), in two halves as
// kFp8DsMla's below: lane l holds pieces l and, where it exists, l + 32.
template <int kWidth>
struct Fp8LanePart {
  static_assert(kWidth % 16 == 0 && kWidth / 16 > 32 && kWidth / 16 <= 64, "two pieces a lane");
  uint4 piece[2];
};
template <int kWidth>
__device__ __forceinline__ Fp8LanePart<kWidth> load_fp8(const uint8_t* row, int lane) {
  Fp8LanePart<kWidth> p;
  p.piece[0] = load16(row + 16 * lane);
  if (lane < kWidth / 16 - 32) p.piece[1] = load16(row + 16 * (lane + 32));
  return p;
}
template <typename T, int kWidth>
__device__ __forceinline__ void store_fp8(const Fp8LanePart<kWidth>& p, float k_scale, uint16_t* out, int lane) {
  store_decoded16<T>(out + 16 * lane, p.piece[0], k_scale);
  if (lane < kWidth / 16 - 32) store_decoded16<T>(out + 16 * (lane + 32), p.piece[1], k_scale);
}

// kFp8DsMla (DeepSeek-V3.2): lane l decodes codes [16 l, 16 l + 16) of 128-value tile l / 8 with
// that tile's scale; lanes 0-7 also copy the bf16 k_pe piece l (8 values). In two halves, so a
// warp can issue several rows' loads before their stores (latent_decode_rows.cu).
struct DsMlaLanePart {
  uint4 codes;
  uint4 rope;  // lanes 0-7
  float scale;
};
__device__ __forceinline__ DsMlaLanePart load_ds_mla(const uint8_t* row, int lane) {
  DsMlaLanePart p;
  p.codes = load16(row + 16 * lane);
  p.scale = reinterpret_cast<const float*>(row + mlakit::mla::kDsMlaScalesOffset)[lane >> 3];
  if (lane < 8) p.rope = load16(row + mlakit::mla::kDsMlaRopeOffset + 16 * lane);
  return p;
}
__device__ __forceinline__ void store_ds_mla(const DsMlaLanePart& p, uint16_t* out, int lane) {
  store_decoded16<__nv_bfloat16>(out + 16 * lane, p.codes, p.scale);
  if (lane < 8) store16(out + mlakit::mla::kDsMlaLatent + 8 * lane, p.rope);
}
__device__ __forceinline__ void context_row_ds_mla(const uint8_t* row, uint16_t* out, int lane) {
  store_ds_mla(load_ds_mla(row, lane), out, lane);
}

}  // namespace fp8
}  // namespace cuda
}  // namespace mlakit
