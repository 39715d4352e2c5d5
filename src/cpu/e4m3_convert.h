// Scalar e4m3 (OCP float8 e4m3fn) <-> float conversions for the CPU backend, the reference and
// the MLA step's CPU quantization. Plain C++, exact: every e4m3 value is a float (and a bf16).
//   bits S EEEE MMM, bias 7: E = 0 subnormal M x 2^-9; E = 1..15 (1 + M/8) x 2^(E-7), except
//   S 1111 111 = NaN (0x7f, 0xff). No infinities; the largest finite value is 448 (0x7e).
// float -> e4m3 rounds to nearest even and saturates to +-448 (infinities included), NaN stays
// NaN, as the GPU's cvt.rn.satfinite.e4m3x2.f32 does.
#pragma once

#include <cmath>
#include <cstdint>

#include "cpu/half_convert.h"

namespace mlakit {
namespace cpu {

constexpr float kE4M3Max = 448.0f;

inline float e4m3_to_float(uint8_t x) {
  const uint32_t sign = static_cast<uint32_t>(x & 0x80u) << 24;
  const uint32_t e = (x >> 3) & 0xFu, m = x & 7u;
  if (e == 15 && m == 7) return bits_float(sign | 0x7fc00000u);  // NaN (quiet)
  if (e == 0) {
    // Subnormal: m x 2^-9, exact in float.
    const float mag = static_cast<float>(m) * 0.001953125f;
    return sign ? -mag : mag;
  }
  // Normal: the float with exponent e - 7 and the three mantissa bits on top.
  return bits_float(sign | ((e - 7u + 127u) << 23) | (m << 20));
}

inline uint8_t float_to_e4m3(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (a < 0x3c800000u) {  // below 2^-6: subnormal range, multiples of 2^-9
    // nearbyint rounds half to even in the default rounding mode; 8 x 2^-9 = 2^-6 is code 0x08,
    // the smallest normal, so a carry out of the subnormals lands on the right code.
    const float q = std::nearbyint(bits_float(a) * 512.0f);
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  if (a >= 0x43e80000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 464 (inf too): saturate
  // Round to nearest even on the 20 dropped mantissa bits; a carry into the exponent is right.
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  const uint32_t code = (((r >> 23) - 127u + 7u) << 3) | ((r >> 20) & 7u);
  return static_cast<uint8_t>(sign | (code > 0x7eu ? 0x7eu : code));
}

}  // namespace cpu
}  // namespace mlakit
