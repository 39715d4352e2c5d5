#include "cpu/kv_cache_codec.h"

#include <cmath>
#include <cstring>

#include "cpu/e4m3_convert.h"
#include "cpu/half_convert.h"
#include "contract/kv_cache_format.h"

namespace mlakit {
namespace mla {
namespace {

float load16(const uint16_t* p, int i, DType t) {
  return t == DType::kBF16 ? cpu::bf16_to_float(p[i]) : cpu::fp16_to_float(p[i]);
}
uint16_t round16(float x, DType t) { return t == DType::kBF16 ? cpu::float_to_bf16(x) : cpu::float_to_fp16(x); }

float scale_of(const uint8_t* row, int tile) {
  float s;
  std::memcpy(&s, row + kDsMlaScalesOffset + 4 * tile, sizeof(s));
  return s;
}

}  // namespace

CacheCodec cache_codec(const MlaConfig& config) {
  return CacheCodec{config.kv_cache_dtype, config.kv_lora_rank, config.qk_rope_head_dim, config.dtype};
}

int64_t cache_row_elements(const CacheCodec& c) {
  return c.format == KvCacheDtype::kFp8DsMla ? kDsMlaRowBytes : c.latent + c.rope;
}

int64_t cache_element_bytes(const CacheCodec& c) {
  return c.format == KvCacheDtype::kAuto ? static_cast<int64_t>(dtype_size(c.dtype)) : 1;
}

uint8_t e4m3_satfinite(float x) { return std::isnan(x) ? uint8_t{0x7f} : cpu::float_to_e4m3(x); }

void encode_row(const CacheCodec& c, const uint16_t* kv_c, const uint16_t* k_pe, float k_scale, uint8_t* row) {
  if (c.format == KvCacheDtype::kFp8) {
    // vLLM's concat_and_cache_mla: x / scale in float32 (a true division, as the CUDA kernel's).
    for (int i = 0; i < c.latent; ++i) row[i] = e4m3_satfinite(load16(kv_c, i, c.dtype) / k_scale);
    for (int i = 0; i < c.rope; ++i) row[c.latent + i] = e4m3_satfinite(load16(k_pe, i, c.dtype) / k_scale);
    return;
  }
  // fp8_ds_mla: per tile its power-of-two scale, then the codes (x / scale is exact).
  for (int t = 0; t < kDsMlaTiles; ++t) {
    const int begin = t * kDsMlaTile;
    float amax = 0.0f;
    for (int i = begin; i < begin + kDsMlaTile; ++i) {
      const float a = std::fabs(load16(kv_c, i, c.dtype));
      if (a > amax) amax = a;  // a NaN compares false: it raises nothing, as fmaxf on the GPU
    }
    const float s = ds_mla_scale(amax);
    for (int i = begin; i < begin + kDsMlaTile; ++i) row[i] = e4m3_satfinite(load16(kv_c, i, c.dtype) / s);
    std::memcpy(row + kDsMlaScalesOffset + 4 * t, &s, sizeof(s));
  }
  std::memcpy(row + kDsMlaRopeOffset, k_pe, 2 * kDsMlaRope);  // bf16, verbatim
}

void decode_row(const CacheCodec& c, const uint8_t* row, float k_scale, uint16_t* out) {
  if (c.format == KvCacheDtype::kFp8) {
    for (int i = 0; i < c.latent + c.rope; ++i) out[i] = round16(cpu::e4m3_to_float(row[i]) * k_scale, c.dtype);
    return;
  }
  for (int i = 0; i < kDsMlaLatent; ++i) {
    out[i] = round16(cpu::e4m3_to_float(row[i]) * scale_of(row, i / kDsMlaTile), c.dtype);
  }
  std::memcpy(out + kDsMlaLatent, row + kDsMlaRopeOffset, 2 * kDsMlaRope);
}

void decode_row_exact(const CacheCodec& c, const uint8_t* row, float k_scale, double* out) {
  if (c.format == KvCacheDtype::kFp8) {
    for (int i = 0; i < c.latent + c.rope; ++i) out[i] = static_cast<double>(cpu::e4m3_to_float(row[i])) * k_scale;
    return;
  }
  for (int i = 0; i < kDsMlaLatent; ++i) {
    out[i] = static_cast<double>(cpu::e4m3_to_float(row[i])) * scale_of(row, i / kDsMlaTile);
  }
  uint16_t rope[kDsMlaRope];
  std::memcpy(rope, row + kDsMlaRopeOffset, sizeof(rope));
  for (int i = 0; i < kDsMlaRope; ++i) out[kDsMlaLatent + i] = cpu::bf16_to_float(rope[i]);
}

}  // namespace mla
}  // namespace mlakit

namespace mlakit {

const char* kv_cache_dtype_name(KvCacheDtype t) {
  switch (t) {
    case KvCacheDtype::kAuto: return "auto";
    case KvCacheDtype::kFp8: return "fp8";
    case KvCacheDtype::kFp8DsMla: return "fp8_ds_mla";
  }
  return "unknown";
}

}  // namespace mlakit
