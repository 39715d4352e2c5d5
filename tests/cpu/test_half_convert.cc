// The library's one bf16/fp16 converter (src/cpu/half_convert.h, also behind the public helpers
// of mlakit/runtime.h): exact round trips, round-to-nearest-even on ties, NaN/inf preserved
// (NaN payload included), checked against the compiler's own _Float16 where it has one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "cpu/half_convert.h"
#include "mlakit/runtime.h"

namespace mlakit {
namespace {

bool is_nan_bits_bf16(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }
bool is_nan_bits_fp16(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

TEST(HalfConvert, EveryPatternRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float b = cpu::bf16_to_float(h), f = cpu::fp16_to_float(h);
    if (is_nan_bits_bf16(h)) {
      EXPECT_TRUE(std::isnan(b));
      EXPECT_TRUE(is_nan_bits_bf16(cpu::float_to_bf16(b)));
    } else {
      EXPECT_EQ(cpu::float_to_bf16(b), h) << std::hex << i;
    }
    if (is_nan_bits_fp16(h)) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_TRUE(is_nan_bits_fp16(cpu::float_to_fp16(f)));
    } else {
      EXPECT_EQ(cpu::float_to_fp16(f), h) << std::hex << i;
    }
    EXPECT_EQ(cpu::float_bits(b), cpu::float_bits(bf16_to_float(h))) << std::hex << i;
    if (!is_nan_bits_fp16(h)) EXPECT_EQ(cpu::float_bits(f), cpu::float_bits(fp16_to_float(h))) << i;
  }
}

TEST(HalfConvert, TiesGoToEven) {
  // Midpoints between neighbouring finite values (as floats, exactly representable) round to
  // the neighbour with an even last bit; just above / below round to the nearer one.
  for (uint32_t i = 0; i < 0x7c00 - 1; ++i) {  // positive finite fp16, next one finite too
    const double lo = cpu::fp16_to_float(static_cast<uint16_t>(i));
    const double hi = cpu::fp16_to_float(static_cast<uint16_t>(i + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    const uint16_t even = (i % 2 == 0) ? i : i + 1;
    EXPECT_EQ(cpu::float_to_fp16(mid), even) << i;
    EXPECT_EQ(cpu::float_to_fp16(-mid), even | 0x8000) << i;
    EXPECT_EQ(cpu::float_to_fp16(std::nextafter(mid, 0.0f)), i) << i;
    EXPECT_EQ(cpu::float_to_fp16(std::nextafter(mid, 1e9f)), i + 1) << i;
  }
  for (uint32_t i = 0; i < 0x7f80 - 1; i += 7) {
    const float lo = cpu::bf16_to_float(static_cast<uint16_t>(i));
    const float hi = cpu::bf16_to_float(static_cast<uint16_t>(i + 1));
    const float mid = cpu::bits_float((cpu::float_bits(lo) + cpu::float_bits(hi)) / 2);
    ASSERT_GT(mid, lo);
    ASSERT_LT(mid, hi);
    EXPECT_EQ(cpu::float_to_bf16(mid), (i % 2 == 0) ? i : i + 1) << i;
  }
  EXPECT_EQ(cpu::float_to_fp16(65519.0f), 0x7bff);  // below the max's half-ulp: stays finite
  EXPECT_EQ(cpu::float_to_fp16(65520.0f), 0x7c00);  // the tie rounds to even = inf
  EXPECT_EQ(cpu::float_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(cpu::float_to_fp16(-INFINITY), 0xfc00);
}

// The public helpers are the backend's converter: tools, tests and the backend round alike.
TEST(HalfConvert, PublicHelpersAreTheBackendConverter) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> bits;
  for (int n = 0; n < 200000; ++n) {
    const float f = cpu::bits_float(bits(rng));  // NaNs included: their payloads must agree too
    ASSERT_EQ(cpu::float_to_bf16(f), float_to_bf16(f)) << std::hex << cpu::float_bits(f);
    ASSERT_EQ(cpu::float_to_fp16(f), float_to_fp16(f)) << std::hex << cpu::float_bits(f);
  }
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    ASSERT_EQ(cpu::float_bits(cpu::fp16_to_float(h)), cpu::float_bits(fp16_to_float(h))) << std::hex << i;
    ASSERT_EQ(cpu::float_bits(cpu::bf16_to_float(h)), cpu::float_bits(bf16_to_float(h))) << std::hex << i;
  }
}

// A NaN keeps its sign and the top payload bits and comes out quiet (the public fp16 helper
// used to return a bare 0x7e00, unlike the backend).
TEST(HalfConvert, NanPayloadIsKept) {
  const float nan_payload = cpu::bits_float(0xffc12345u);  // -NaN, payload 0x412345
  EXPECT_EQ(float_to_fp16(nan_payload), 0xfe09);           // sign | quiet | payload >> 13
  EXPECT_EQ(float_to_bf16(nan_payload), 0xffc1);
  const float snan = cpu::bits_float(0x7f800001u);  // signalling, payload only in the low bits
  EXPECT_TRUE(is_nan_bits_fp16(float_to_fp16(snan)));
  EXPECT_TRUE(is_nan_bits_bf16(float_to_bf16(snan)));
  EXPECT_EQ(cpu::float_bits(fp16_to_float(0x7e09)), 0x7fc12000u);
}

#if defined(__FLT16_MANT_DIG__)
// An oracle written by someone else: the compiler's float -> _Float16 conversion (IEEE round
// to nearest even, NaN payload kept the same way).
TEST(HalfConvert, MatchesCompilerFloat16) {
  auto ref = [](float f) {
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
  };
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int n = 0; n < 300000; ++n) {
    const float f = cpu::bits_float(bits(rng));
    ASSERT_EQ(float_to_fp16(f), ref(f)) << std::hex << cpu::float_bits(f);
  }
  std::normal_distribution<float> nd(0.0f, 1e-4f);  // many fp16 subnormals
  for (int n = 0; n < 100000; ++n) {
    const float f = nd(rng);
    ASSERT_EQ(float_to_fp16(f), ref(f)) << f;
  }
  for (uint32_t i = 0; i < 65536; ++i) {
    _Float16 h;
    const uint16_t b = static_cast<uint16_t>(i);
    std::memcpy(&h, &b, 2);
    ASSERT_EQ(cpu::float_bits(fp16_to_float(b)), cpu::float_bits(static_cast<float>(h))) << std::hex << i;
  }
}
#endif

}  // namespace
}  // namespace mlakit
