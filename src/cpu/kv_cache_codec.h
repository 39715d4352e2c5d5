// One latent cache row of each FP8 format (mlakit/mla.h, KvCacheDtype) on the host: encoded from
// a token's 16-bit kv_c / k_pe as the formats define, decoded into the step's 16-bit latents
// (what the CPU gather hands the up-projection) or exactly into double (the reference). Plain
// C++, scalar: the CPU gather (mla/mla_ops_cpu.cc), reference::mla_step and the CPU paths of
// latent attention use it, and the CUDA gather (mla/cuda/gather_fp8.cu) computes the same bytes.
#pragma once

#include <cstdint>

#include "mlakit/mla.h"

namespace mlakit {
namespace mla {

struct CacheCodec {
  KvCacheDtype format = KvCacheDtype::kAuto;
  int latent = 0;  // kv_lora_rank
  int rope = 0;    // qk_rope_head_dim
  DType dtype = DType::kBF16;  // the step's 16-bit dtype (kv_c, k_pe and the decoded latents)
};

CacheCodec cache_codec(const MlaConfig& config);

// Elements of one row of the cache tensor: latent + rope (kAuto, kFp8) or 656 bytes (kFp8DsMla).
int64_t cache_row_elements(const CacheCodec& c);
// Bytes of one element of the cache tensor: the 16-bit dtype's for kAuto, else 1.
int64_t cache_element_bytes(const CacheCodec& c);

// e4m3 code of x, rounded to nearest even, saturated to +-448 (infinities too), NaN -> 0x7f:
// what the GPU's cvt.rn.satfinite.e4m3x2.f32 gives, NaN made canonical (vLLM's fp8 conversion).
uint8_t e4m3_satfinite(float x);

// An FP8 format's row from one token's kv_c [latent] and k_pe [rope] (16-bit of c.dtype).
// k_scale: kFp8's per-layer scale (ignored otherwise).
void encode_row(const CacheCodec& c, const uint16_t* kv_c, const uint16_t* k_pe, float k_scale, uint8_t* row);
// An FP8 format's row as 16-bit latents [latent + rope]: code x scale in float32, rounded to
// nearest even into c.dtype (k_pe of kFp8DsMla copied).
void decode_row(const CacheCodec& c, const uint8_t* row, float k_scale, uint16_t* out);
// The same exactly, in double (code x scale).
void decode_row_exact(const CacheCodec& c, const uint8_t* row, float k_scale, double* out);

}  // namespace mla
}  // namespace mlakit
