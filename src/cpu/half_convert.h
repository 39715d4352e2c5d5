// Scalar bf16/fp16 <-> float conversions for the CPU backend and the reference.
// Round to nearest even; NaN stays NaN (quieted, sign and top payload bits kept); overflow
// goes to +-inf; fp16 subnormals are exact in both directions. Branch-light and inline so the
// per-tile conversion loops stay cheap. Plain C++, no intrinsics.
#pragma once

#include <cstdint>
#include <cstring>

#include "mlakit/tensor.h"

namespace mlakit {
namespace cpu {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    // NaN: truncating could clear every payload bit left in the top half and yield inf, so
    // force the quiet bit.
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits; a carry into the exponent is the correct
  // result (it rounds up to the next binade or to inf).
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float fp16_to_float(uint16_t h) {
  // Branch-free (it runs on every K/V element): placing the 15 exponent+mantissa bits at the
  // bottom of a float's and multiplying by 2^112 rebiases the exponent exactly, subnormals
  // included; exponent 31 (inf/NaN) is selected separately, a NaN quieted as the hardware
  // conversions (F16C, C's _Float16) do.
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t finite = float_bits(bits_float(em) * 5.192296858534828e33f);  // 2^112
  const uint32_t quiet = (h & 0x3ffu) != 0 ? 0x00400000u : 0u;
  const uint32_t mag = (h & 0x7c00u) == 0x7c00u ? (em | 0x7f800000u | quiet) : finite;
  return bits_float(sign | mag);
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {  // NaN: keep it NaN and quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  }
  // 65520 = 65504 + half an ulp: ties go to the even neighbour, which is inf.
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // normal in fp16 (>= 2^-14)
    const uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);  // round to nearest even on 13 bits
    return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
  }
  // Subnormal or zero: adding 0.5f puts the value's 2^-24 multiples into the low mantissa
  // bits of a float, rounded to nearest even by the FPU itself.
  const float mag = bits_float(a) + 0.5f;
  return static_cast<uint16_t>(sign | (float_bits(mag) - 0x3f000000u));
}

// Element access by dtype, resolved at compile time so conversion loops stay tight.
template <DType D> struct Elem;
template <> struct Elem<DType::kBF16> {
  using T = uint16_t;
  static float load(T x) { return bf16_to_float(x); }
  static T store(float f) { return float_to_bf16(f); }
};
template <> struct Elem<DType::kFP16> {
  using T = uint16_t;
  static float load(T x) { return fp16_to_float(x); }
  static T store(float f) { return float_to_fp16(f); }
};
template <> struct Elem<DType::kFP32> {
  using T = float;
  static float load(T x) { return x; }
  static T store(float f) { return f; }
};

}  // namespace cpu
}  // namespace mlakit
