// e4m3 conversions 16 values at a time on AVX-512, bit for bit those of e4m3_convert.h (the tests
// compare them on every code and on every float class): float -> e4m3 rounds to nearest even and
// saturates to +-448, NaN stays NaN; e4m3 -> bf16 is exact. For the CPU backend's FP8 passes (the
// MLA step's rounding, the decoding of e4m3 inputs into bf16). Callers check
// cpu_isa_available(CpuIsa::kAvx512Bf16) first; the functions carry their target attribute.
#pragma once

#if defined(__GNUC__) && defined(__x86_64__)
// GCC 12's AVX-512 headers pass _mm512_undefined_* values, which trip both warnings where inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#define MLAKIT_CPU_HAVE_E4M3_AVX512 1
#endif

#ifdef MLAKIT_CPU_HAVE_E4M3_AVX512

#include <cstdint>

#define MLAKIT_E4M3_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

namespace mlakit {
namespace cpu {

// 16 floats -> 16 e4m3 codes (e4m3_convert.h, float_to_e4m3).
MLAKIT_E4M3_TARGET inline __m128i float_to_e4m3_x16(__m512 f) {
  const __m512i u = _mm512_castps_si512(f);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  // Normal range: round to nearest even on the 20 dropped mantissa bits (a carry into the
  // exponent is right), then rebias the exponent.
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0x7ffff)), odd);
  __m512i code = _mm512_or_si512(
      _mm512_slli_epi32(_mm512_sub_epi32(_mm512_srli_epi32(r, 23), _mm512_set1_epi32(120)), 3),
      _mm512_and_si512(_mm512_srli_epi32(r, 20), _mm512_set1_epi32(7)));
  code = _mm512_min_epi32(code, _mm512_set1_epi32(0x7e));
  // Below 2^-6: multiples of 2^-9, rounded to nearest even (8 x 2^-9 is code 0x08).
  const __m512 mag = _mm512_castsi512_ps(a);
  const __m512i sub = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(mag, _mm512_set1_ps(512.0f)),
                                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  code = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x3c800000)), code, sub);
  // >= 464 (infinities too) saturate; NaN stays NaN.
  code = _mm512_mask_blend_epi32(_mm512_cmpge_epi32_mask(a, _mm512_set1_epi32(0x43e80000)), code,
                                 _mm512_set1_epi32(0x7e));
  code = _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f800000)), code,
                                 _mm512_set1_epi32(0x7f));
  return _mm512_cvtepi32_epi8(_mm512_or_si512(code, sign));
}

// 16 e4m3 codes -> 16 bf16 values (exact).
MLAKIT_E4M3_TARGET inline __m256i e4m3_to_bf16_x16(__m128i codes) {
  const __m512i x = _mm512_cvtepu8_epi32(codes);
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 8);
  const __m512i e = _mm512_and_si512(_mm512_srli_epi32(x, 3), _mm512_set1_epi32(15));
  const __m512i m = _mm512_and_si512(x, _mm512_set1_epi32(7));
  // Normal: exponent e - 7 + 127, the three mantissa bits on top of bf16's seven.
  __m512i b = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(120)), 7),
                              _mm512_slli_epi32(m, 4));
  // Subnormal (e = 0): m x 2^-9, exact in float, whose top 16 bits are its bf16.
  const __m512i sub = _mm512_srli_epi32(
      _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(0.001953125f))), 16);
  b = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), b, sub);
  // S 1111 111 is NaN.
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7f)), _mm512_set1_epi32(0x7f));
  b = _mm512_mask_blend_epi32(nan, b, _mm512_set1_epi32(0x7fc0));
  return _mm512_cvtepi32_epi16(_mm512_or_si512(b, sign));
}

}  // namespace cpu
}  // namespace mlakit

#endif  // MLAKIT_CPU_HAVE_E4M3_AVX512
