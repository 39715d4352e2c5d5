// The FP8 latent cache formats (mlakit/mla.h, KvCacheDtype) written down again from their
// definitions, for the tests, independently of the library's codec (src/cpu/kv_cache_codec.cc)
// and its e4m3 conversion: an engine shares the cache with its decode kernels, so the bytes the
// step writes must be the formats' bytes, not merely ones the step itself reads back.
//   e4m3 (OCP e4m3fn): s eeee mmm, bias 7; e = 0: m x 2^-9; else (8 + m) x 2^(e - 10); 0x7f /
//     0xff NaN. A float goes to the nearest of the 254 finite codes, ties to the even code,
//     beyond 448 to +-448 (the CUDA cvt's satfinite); NaN to 0x7f.
//   fp8 (vLLM's concat_and_cache_mla): code = e4m3(float(x) / k_scale) for all L + R values.
//   fp8_ds_mla (FlashMLA's quantize_k_cache, DeepSeek-V3.2): per 128 values s = amax / 448 in
//     float32 (NaN ignored), at least 1e-4, rounded up to a power of two; code = e4m3(x / s);
//     bytes [0, 512) codes, [512, 528) the four scales (float32), [528, 656) k_pe in bf16.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "mlakit/mla.h"
#include "mlakit/runtime.h"

namespace mlakit {
namespace test {
namespace spec {

inline double e4m3_value(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (c & 0x80) ? -mag : mag;
}

inline uint8_t e4m3_code(float x) {
  if (std::isnan(x)) return 0x7f;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {  // codes ascend with their value: ties meet an odd then an even code
    const double d = std::fabs(e4m3_value(static_cast<uint8_t>(c)) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | best);
}

// The smallest power of two >= s (s > 0), through frexp: s = f x 2^e with f in [0.5, 1).
inline float pow2_ceil(float s) {
  if (std::isinf(s)) return s;
  int e = 0;
  const float f = std::frexp(s, &e);
  return f == 0.5f ? s : std::ldexp(1.0f, e);
}

inline float value16(uint16_t h, DType t) { return t == DType::kBF16 ? bf16_to_float(h) : fp16_to_float(h); }
inline uint16_t round16(float x, DType t) { return t == DType::kBF16 ? float_to_bf16(x) : float_to_fp16(x); }

// Bytes of one row.
inline int64_t row_bytes(KvCacheDtype f, int latent, int rope) {
  return f == KvCacheDtype::kFp8DsMla ? 656 : latent + rope;
}

// A row from one token's 16-bit kv_c [latent] and k_pe [rope].
inline void encode(KvCacheDtype f, DType t, const uint16_t* kv_c, int latent, const uint16_t* k_pe, int rope,
                   float k_scale, uint8_t* row) {
  if (f == KvCacheDtype::kFp8) {
    for (int i = 0; i < latent; ++i) row[i] = e4m3_code(value16(kv_c[i], t) / k_scale);
    for (int i = 0; i < rope; ++i) row[latent + i] = e4m3_code(value16(k_pe[i], t) / k_scale);
    return;
  }
  for (int tile = 0; tile < 4; ++tile) {
    float amax = 0.0f;
    for (int i = 0; i < 128; ++i) {
      const float a = std::fabs(value16(kv_c[tile * 128 + i], t));
      if (!std::isnan(a)) amax = std::max(amax, a);
    }
    const float s = pow2_ceil(std::max(amax / 448.0f, 1e-4f));
    for (int i = 0; i < 128; ++i) row[tile * 128 + i] = e4m3_code(value16(kv_c[tile * 128 + i], t) / s);
    std::memcpy(row + 512 + 4 * tile, &s, 4);
  }
  std::memcpy(row + 528, k_pe, 128);
}

// The row's values (code x scale), in double.
inline std::vector<double> decode(KvCacheDtype f, const uint8_t* row, int latent, int rope, float k_scale) {
  std::vector<double> v(static_cast<size_t>(latent + rope));
  if (f == KvCacheDtype::kFp8) {
    for (int i = 0; i < latent + rope; ++i) v[static_cast<size_t>(i)] = e4m3_value(row[i]) * k_scale;
    return v;
  }
  for (int i = 0; i < 512; ++i) {
    float s;
    std::memcpy(&s, row + 512 + 4 * (i / 128), 4);
    v[static_cast<size_t>(i)] = e4m3_value(row[i]) * s;
  }
  for (int i = 0; i < 64; ++i) {
    uint16_t h;
    std::memcpy(&h, row + 528 + 2 * i, 2);
    v[static_cast<size_t>(512 + i)] = bf16_to_float(h);
  }
  return v;
}

// The row as the gather hands it to the up-projection: code x scale in float32, rounded to
// nearest even into the 16-bit dtype (k_pe of fp8_ds_mla as stored).
inline std::vector<uint16_t> decode16(KvCacheDtype f, DType t, const uint8_t* row, int latent, int rope,
                                      float k_scale) {
  std::vector<uint16_t> v(static_cast<size_t>(latent + rope));
  if (f == KvCacheDtype::kFp8) {
    for (int i = 0; i < latent + rope; ++i)
      v[static_cast<size_t>(i)] = round16(static_cast<float>(e4m3_value(row[i])) * k_scale, t);
    return v;
  }
  for (int i = 0; i < 512; ++i) {
    float s;
    std::memcpy(&s, row + 512 + 4 * (i / 128), 4);
    v[static_cast<size_t>(i)] = round16(static_cast<float>(e4m3_value(row[i])) * s, t);
  }
  std::memcpy(v.data() + 512, row + 528, 128);
  return v;
}

}  // namespace spec
}  // namespace test
}  // namespace mlakit
