// The FP8 latent cache formats (mlakit/kv_cache.h, KvCacheDtype): the fp8_ds_mla row layout and
// its scale rule. The host codec (cpu/kv_cache_codec.cc: the CPU gather, the float64 references,
// latent attention's CPU paths), the MLA step's CUDA gather (mla/cuda/gather_fp8.cu) and the latent
// kernel (cuda/sm90/latent_kernel_sm90.cuh) share these, so they cannot disagree.
#pragma once

#include <cstdint>
#include <cstring>

#include "contract/host_device.h"

namespace mlakit {
namespace mla {

constexpr float kE4M3Largest = 448.0f;

// fp8_ds_mla (DeepSeek-V3.2, FlashMLA's "V32_FP8Sparse"): kv_lora_rank 512, qk_rope_head_dim 64,
// one 656-byte row per token: [0, 512) e4m3 codes of kv_c, [512, 528) four float32 scales (one
// per 128 codes), [528, 656) k_pe's 64 bf16 values. 656 = 41 x 16 bytes.
constexpr int kDsMlaLatent = 512;
constexpr int kDsMlaRope = 64;
constexpr int kDsMlaTile = 128;
constexpr int kDsMlaTiles = kDsMlaLatent / kDsMlaTile;
constexpr int kDsMlaScalesOffset = kDsMlaLatent;
constexpr int kDsMlaRopeOffset = kDsMlaScalesOffset + 4 * kDsMlaTiles;
constexpr int kDsMlaRowBytes = kDsMlaRopeOffset + 2 * kDsMlaRope;
static_assert(kDsMlaRowBytes == 656 && kDsMlaRowBytes % 16 == 0, "656-byte rows of 16-byte pieces");
// FlashMLA's floor of amax / 448 (its quantizer's clamp_min(.., 1e-4), "FP8_AMAX_MARGIN"): an
// all-zero or tiny tile gets the scale 2^-13.
constexpr float kDsMlaMinScale = 1e-4f;

MLAKIT_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

MLAKIT_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// The smallest power of two >= s, for a positive normal s (inf stays inf). Exact, from the bits:
// FlashMLA's reference writes 2^ceil(log2(s)) in float32, the same for every scale a 16-bit
// latent gives (amax / 448 is never within a float ulp of a power of two without being one).
MLAKIT_HD float pow2_at_least(float s) {
  const uint32_t u = float_to_bits(s);
  if ((u & 0x007fffffu) == 0 || (u & 0x7f800000u) == 0x7f800000u) return s;
  return bits_to_float((u & 0x7f800000u) + 0x00800000u);  // next exponent, mantissa 0
}

// The scale of one 128-value tile of a fp8_ds_mla row from its largest |x| (NaN ignored by the
// caller's maximum): max(amax / 448, 1e-4) rounded up to a power of two, so that x / scale is
// exact and never passes 448. amax = inf gives inf (the tile decodes to NaN: 0 x inf).
MLAKIT_HD float ds_mla_scale(float amax) {
#if defined(__CUDA_ARCH__)
  const float s = __fdiv_rn(amax, kE4M3Largest);
#else
  const float s = amax / kE4M3Largest;
#endif
  return pow2_at_least(s > kDsMlaMinScale ? s : kDsMlaMinScale);
}

}  // namespace mla
}  // namespace mlakit
