// FP8 (e4m3) on the CPU: the conversions against the OCP e4m3fn definition (every code), the
// float64 reference's decode and descales, the CPU backend against the reference, and the
// validation of dtypes and descale factors (messages and "a rejected call writes nothing").
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention_cases.h"
#include "cpu/cpu_isa.h"
#include "cpu/e4m3_avx512.h"
#include "cpu/e4m3_convert.h"

namespace mlakit {
namespace test {
namespace {

// The OCP 8-bit float e4m3fn value of `code`, written from the definition (not from the code
// under test): sign, exponent bias 7, subnormals at exponent 0, S.1111.111 NaN, no infinities.
double ocp_e4m3(uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

TEST(E4M3, EveryCodeDecodesToItsOcpValue) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const double want = ocp_e4m3(static_cast<uint8_t>(c));
    const float got = cpu::e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code 0x" << std::hex << c;
      ++nans;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "code 0x" << std::hex << c;
    EXPECT_EQ(std::signbit(got), c >= 0x80) << "code 0x" << std::hex << c;  // -0 is 0x80
    // The public helper is the same conversion.
    EXPECT_EQ(e4m3_to_float(static_cast<uint8_t>(c)), got);
  }
  EXPECT_EQ(nans, 2);  // 0x7f and 0xff only
  EXPECT_TRUE(std::isnan(cpu::e4m3_to_float(0x7f)) && std::isnan(cpu::e4m3_to_float(0xff)));
  EXPECT_EQ(cpu::e4m3_to_float(0x7e), 448.0f);     // the largest finite value
  EXPECT_EQ(cpu::e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(cpu::e4m3_to_float(0x01), 0x1p-9f);    // the smallest subnormal
  EXPECT_EQ(cpu::e4m3_to_float(0x07), 7 * 0x1p-9f);  // the largest subnormal
  EXPECT_EQ(cpu::e4m3_to_float(0x08), 0x1p-6f);    // the smallest normal
}

TEST(E4M3, EncodeInvertsDecodeOnEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    const float x = cpu::e4m3_to_float(static_cast<uint8_t>(c));
    EXPECT_EQ(cpu::float_to_e4m3(x), c) << "value " << x;
    EXPECT_EQ(float_to_e4m3(x), c);
  }
}

// Round to nearest, ties to even, at every pair of neighbouring codes (subnormal, across the
// subnormal / normal boundary, normal, up to the largest), on both sides of each midpoint.
TEST(E4M3, RoundsToNearestEvenBetweenEveryPairOfNeighbours) {
  for (int c = 0; c < 0x7e; ++c) {
    const double lo = ocp_e4m3(static_cast<uint8_t>(c)), hi = ocp_e4m3(static_cast<uint8_t>(c + 1));
    const double mid = (lo + hi) / 2;
    const int even = (c % 2 == 0) ? c : c + 1;
    for (int sign : {1, -1}) {
      const uint8_t sb = sign < 0 ? 0x80 : 0;
      EXPECT_EQ(cpu::float_to_e4m3(static_cast<float>(sign * mid)), sb | even) << "midpoint " << sign * mid;
      EXPECT_EQ(cpu::float_to_e4m3(std::nextafter(static_cast<float>(sign * mid), 0.0f)), sb | c)
          << "below " << sign * mid;
      EXPECT_EQ(cpu::float_to_e4m3(std::nextafter(static_cast<float>(sign * mid), sign * 1e9f)), sb | (c + 1))
          << "above " << sign * mid;
    }
  }
}

TEST(E4M3, SaturatesAtTheLargestFiniteValueAndKeepsNaN) {
  EXPECT_EQ(cpu::float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(cpu::float_to_e4m3(463.99f), 0x7e);
  EXPECT_EQ(cpu::float_to_e4m3(464.0f), 0x7e);  // the midpoint to 480 (no such code): saturated
  EXPECT_EQ(cpu::float_to_e4m3(1e6f), 0x7e);
  EXPECT_EQ(cpu::float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(cpu::float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(cpu::float_to_e4m3(-1e30f), 0xfe);
  EXPECT_EQ(cpu::float_to_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(cpu::float_to_e4m3(0x1p-11f), 0x00);   // below half the smallest subnormal: 0
  EXPECT_EQ(cpu::float_to_e4m3(-0x1p-11f), 0x80);  // -0 keeps its sign
  EXPECT_EQ(cpu::float_to_e4m3(0x1p-10f), 0x00);   // half the smallest subnormal: tie to even 0
  EXPECT_EQ(cpu::float_to_e4m3(1.5f * 0x1p-9f), 0x02);  // tie between 1 and 2 subnormal steps: even
}

#ifdef MLAKIT_CPU_HAVE_E4M3_AVX512
// The 16-lane conversions (cpu/e4m3_avx512.h) against the scalar ones: every code decoded, and
// floats of every class encoded: a sweep of bit patterns over the whole range, every e4m3 value,
// its neighbours and the ties between them, both signs, infinities and NaNs.
MLAKIT_E4M3_TARGET void vector_conversions(const float* in, uint8_t* codes, const uint8_t* code_in, uint16_t* bf16) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), cpu::float_to_e4m3_x16(_mm512_loadu_ps(in)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(bf16),
                      cpu::e4m3_to_bf16_x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(code_in))));
}

TEST(E4M3, VectorConversionsMatchScalarBitForBit) {
  if (!cpu::cpu_isa_available(cpu::CpuIsa::kAvx512Bf16)) {
    std::printf("[  SKIPPED ] no AVX-512 on this CPU\n");
    GTEST_SKIP() << "no AVX-512";
  }
  std::vector<float> floats;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4093) floats.push_back(cpu::bits_float(static_cast<uint32_t>(u)));
  for (int c = 0; c < 256; ++c) {
    const float x = cpu::e4m3_to_float(static_cast<uint8_t>(c));
    const float y = cpu::e4m3_to_float(static_cast<uint8_t>(c + 1 < 256 ? c + 1 : c));
    for (float f : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e9f), 0.5f * (x + y)}) {
      floats.push_back(f);
      floats.push_back(-f);
    }
  }
  for (float f : {0.0f, -0.0f, 448.0f, 463.99f, 464.0f, 1e30f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), 0.015625f, 0.0009765625f, 0.00146484375f, 1e-40f})
    floats.push_back(f);
  while (floats.size() % 16 != 0) floats.push_back(0.0f);
  uint8_t codes[16], code_in[16];
  uint16_t bf16[16];
  int checked = 0;
  for (size_t i = 0; i < floats.size(); i += 16) {
    for (int l = 0; l < 16; ++l) code_in[l] = static_cast<uint8_t>((i / 16 * 16 + l) % 256);
    vector_conversions(&floats[i], codes, code_in, bf16);
    for (int l = 0; l < 16; ++l) {
      ASSERT_EQ(codes[l], cpu::float_to_e4m3(floats[i + l])) << "float bits " << std::hex << cpu::float_bits(floats[i + l]);
      ASSERT_EQ(bf16[l], cpu::float_to_bf16(cpu::e4m3_to_float(code_in[l]))) << "code " << int(code_in[l]);
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000000);
}
#endif

TEST(E4M3, DTypeBasics) {
  EXPECT_EQ(dtype_size(DType::kE4M3), 1u);
  EXPECT_STREQ(dtype_name(DType::kE4M3), "e4m3");
  HostTensor t(DType::kE4M3, {3});
  t.set(0, 1.0);
  t.set(1, 0.3);  // -> 0.3125 (the nearest e4m3 value)
  t.set(2, -500.0);
  EXPECT_EQ(t.get(0), 1.0);
  EXPECT_EQ(t.get(1), 0.3125);
  EXPECT_EQ(t.get(2), -448.0);
}

// A random FP8 problem: q, k, v e4m3 (values from N(0, sd) rounded, sd chosen so the e4m3
// grid is used over several binades) and descale factors [batch + extra, Hkv] in [0.25, 4).
struct Fp8Problem {
  AttnProblem p;
  HostTensor qd, kd, vd;
  Descales descales() const { return descales_of(qd, kd, vd); }
  static Descales descales_of(const HostTensor& q, const HostTensor& k, const HostTensor& v) {
    static thread_local TensorView views[3];
    views[0] = q.view();
    views[1] = k.view();
    views[2] = v.view();
    return Descales{&views[0], &views[1], &views[2]};
  }
};

Fp8Problem make_fp8_problem(int heads, int kv_heads, int dqk, int dvo, const std::vector<int32_t>& q_lens,
                            const std::vector<int32_t>& kv_lens, std::mt19937_64& rng, int extra_rows = 2) {
  Fp8Problem f;
  f.p = make_problem(DType::kE4M3, heads, kv_heads, dqk, dvo, q_lens, kv_lens, rng);
  f.p.q.fill_normal(rng, 3.0);
  f.p.k.fill_normal(rng, 3.0);
  f.p.v.fill_normal(rng, 20.0);
  const int64_t rows = f.p.batch() + extra_rows;
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  for (HostTensor* t : {&f.qd, &f.kd, &f.vd}) {
    *t = HostTensor(DType::kFP32, {rows, kv_heads});
    for (int64_t i = 0; i < t->numel(); ++i) t->set(i, std::exp2(u(rng)));
  }
  // The scores' scale: q . k / sqrt(dqk) * qd * kd is O(10) with these magnitudes; the softmax
  // is then neither flat nor one-hot.
  return f;
}

// The same inputs as float64 tensors with the descales applied ([b, h / group] for q, [b, h] for
// k and v), for a reference run without descales.
struct Dequantized {
  HostTensor q, k, v;
};
Dequantized dequantize(const Fp8Problem& f) {
  const AttnProblem& p = f.p;
  Dequantized d{HostTensor(DType::kFP64, {p.total_q(), p.heads, p.dqk}),
                HostTensor(DType::kFP64, {p.total_kv(), p.kv_heads, p.dqk}),
                HostTensor(DType::kFP64, {p.total_kv(), p.kv_heads, p.dvo})};
  const int group = p.heads / p.kv_heads;
  for (int b = 0; b < p.batch(); ++b) {
    for (int64_t t = p.qo_indptr[b]; t < p.qo_indptr[b + 1]; ++t)
      for (int h = 0; h < p.heads; ++h)
        for (int x = 0; x < p.dqk; ++x) {
          const int64_t i = (t * p.heads + h) * p.dqk + x;
          d.q.set(i, p.q.get(i) * f.qd.get(b * p.kv_heads + h / group));
        }
    for (int64_t t = p.kv_indptr[b]; t < p.kv_indptr[b + 1]; ++t)
      for (int h = 0; h < p.kv_heads; ++h) {
        for (int x = 0; x < p.dqk; ++x) {
          const int64_t i = (t * p.kv_heads + h) * p.dqk + x;
          d.k.set(i, p.k.get(i) * f.kd.get(b * p.kv_heads + h));
        }
        for (int x = 0; x < p.dvo; ++x) {
          const int64_t i = (t * p.kv_heads + h) * p.dvo + x;
          d.v.set(i, p.v.get(i) * f.vd.get(b * p.kv_heads + h));
        }
      }
  }
  return d;
}

RefResult fp8_reference(const Fp8Problem& f, const PrefillOptions& o, bool with_descales = true) {
  const AttnProblem& p = f.p;
  RefResult r{HostTensor(DType::kFP64, {p.total_q(), p.heads, p.dvo}), HostTensor(DType::kFP64, {p.total_q(), p.heads})};
  TensorView lse = r.lse.view();
  reference::ragged_prefill(p.q.view(), p.k.view(), p.v.view(), p.qo_indptr.data(), p.kv_indptr.data(), p.batch(),
                            o, r.out.view(), &lse, with_descales ? f.descales() : Descales{});
  return r;
}

// The reference's descales are exactly "attention of the dequantized inputs": against the same
// reference run on float64 copies q * qd, k * kd, v * vd (materialized here, not by the code
// under test), within float64 rounding.
TEST(E4M3Reference, DescalesAreAttentionOfTheDequantizedInputs) {
  std::mt19937_64 rng(11);
  for (const PrefillOptions& o : {opts(false), opts(true), opts(true, 40, 6.0f, 0.2f)}) {
    Fp8Problem f = make_fp8_problem(6, 2, 64, 48, {0, 1, 37, 130}, {5, 1, 60, 130}, rng);
    const RefResult fp8 = fp8_reference(f, o);
    Dequantized d = dequantize(f);
    RefResult plain{HostTensor(DType::kFP64, fp8.out.shape()), HostTensor(DType::kFP64, fp8.lse.shape())};
    TensorView lse = plain.lse.view();
    reference::ragged_prefill(d.q.view(), d.k.view(), d.v.view(), f.p.qo_indptr.data(), f.p.kv_indptr.data(),
                              f.p.batch(), o, plain.out.view(), &lse);
    EXPECT_LE(relative_error(fp8.out, plain.out), 1e-12);
    const std::vector<double> a = fp8.lse.to_doubles(), b = plain.lse.to_doubles();
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::isinf(b[i])) EXPECT_EQ(a[i], b[i]);
      else EXPECT_NEAR(a[i], b[i], 1e-10);
    }
    // Without descales the result differs (the factors are not all 1): the test can fail.
    EXPECT_GT(relative_error(fp8_reference(f, o, false).out, plain.out), 1e-2);
  }
}

PrefillConfig fp8_config(const AttnProblem& p, DType out_dtype, int max_batch) {
  PrefillConfig c;
  c.num_qo_heads = p.heads;
  c.num_kv_heads = p.kv_heads;
  c.head_dim_qk = p.dqk;
  c.head_dim_vo = p.dvo;
  c.dtype = DType::kE4M3;
  c.out_dtype = out_dtype;
  c.max_batch = max_batch;
  c.max_q_tokens = std::max<int64_t>(p.total_q(), 1);
  c.max_kv_tokens = std::max<int64_t>(p.total_kv(), 1);
  c.device = Device::cpu();
  return c;
}

// Checks out (out_dtype, poisoned before the run) and lse against the reference: nothing left
// NaN, empty rows exactly 0 / -inf, errors within the output dtype's rounding.
void expect_matches_reference(const Fp8Problem& f, const PrefillOptions& o, const HostTensor& out,
                              const HostTensor& lse, const std::string& what) {
  const RefResult ref = fp8_reference(f, o);
  const std::vector<double> got = out.to_doubles();
  int64_t nan = 0;
  for (double x : got) nan += std::isnan(x) ? 1 : 0;
  EXPECT_EQ(nan, 0) << what;
  const int dvo = f.p.dvo;
  for (int64_t r = 0; r < lse.numel(); ++r) {
    const double w = ref.lse.get(r), g = lse.get(r);
    if (std::isinf(w)) {
      EXPECT_EQ(g, w) << what << " lse row " << r;
      for (int d = 0; d < dvo; ++d) EXPECT_EQ(got[r * dvo + d], 0.0) << what << " row " << r;
    } else {
      EXPECT_NEAR(g, w, 1e-4 * std::max(1.0, std::fabs(w))) << what << " lse row " << r;
    }
  }
  const double err = relative_error(got, ref.out.to_doubles());
  std::printf("[   CASE   ] %s: relerr %.3e\n", what.c_str(), err);
  EXPECT_LE(err, out.dtype() == DType::kBF16 ? 1e-2 : 2e-3) << what;
}

TEST(E4M3CpuBackend, MatchesTheReferenceWithDescales) {
  std::mt19937_64 rng(7);
  struct Case {
    int heads, kv_heads, dqk, dvo;
    std::vector<int32_t> q, kv;
    PrefillOptions o;
    DType out;
  };
  const std::vector<Case> cases = {
      {4, 4, 192, 128, {0, 1, 7, 64, 65, 130}, {0, 1, 7, 64, 65, 130}, opts(false), DType::kBF16},
      {4, 4, 192, 128, {0, 1, 7, 64, 65, 130}, {0, 1, 7, 64, 65, 130}, opts(true), DType::kBF16},
      {8, 2, 192, 128, {33, 100, 3}, {70, 150, 0}, opts(true), DType::kFP16},  // GQA, q < kv, empty rows
      {4, 1, 128, 128, {90, 40}, {200, 40}, opts(true, 30, 5.0f, 0.3f), DType::kBF16},  // window, cap, scale
      {2, 2, 64, 64, {129}, {129}, opts(false, 50), DType::kFP16},
  };
  for (const Case& c : cases) {
    Fp8Problem f = make_fp8_problem(c.heads, c.kv_heads, c.dqk, c.dvo, c.q, c.kv, rng);
    RaggedPrefill rp(fp8_config(f.p, c.out, f.p.batch()));
    rp.plan(f.p.qo_indptr.data(), f.p.kv_indptr.data(), f.p.batch(), c.o);
    HostTensor out(c.out, {f.p.total_q(), c.heads, c.dvo}), lse(DType::kFP32, {f.p.total_q(), c.heads});
    out.fill_bytes(0xFF);
    lse.fill_bytes(0xFF);
    TensorView lv = lse.view();
    rp.run(f.p.q.view(), f.p.k.view(), f.p.v.view(), out.view(), &lv, f.descales());
    expect_matches_reference(f, c.o, out, lse,
                             "H=" + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " d=" +
                                 std::to_string(c.dqk) + " causal=" + std::to_string(c.o.causal) + " out " +
                                 dtype_name(c.out));
  }
}

// K in two parts (MLA): k [T, Hkv, Dqk - R] and one shared k_rope [T, R]; k_descale covers both.
TEST(E4M3CpuBackend, SplitKMatchesTheReference) {
  std::mt19937_64 rng(8);
  const int R = 64;
  Fp8Problem f = make_fp8_problem(4, 4, 192, 128, {50, 129, 1}, {80, 129, 1}, rng);
  // The full K the reference sees: columns [0, 128) per head, then one rope row shared by all.
  HostTensor k_nope(DType::kE4M3, {f.p.total_kv(), 4, 192 - R}), k_rope(DType::kE4M3, {f.p.total_kv(), R});
  k_nope.fill_normal(rng, 3.0);
  k_rope.fill_normal(rng, 3.0);
  for (int64_t t = 0; t < f.p.total_kv(); ++t)
    for (int h = 0; h < 4; ++h)
      for (int x = 0; x < 192; ++x)
        f.p.k.set((t * 4 + h) * 192 + x, x < 192 - R ? k_nope.get((t * 4 + h) * (192 - R) + x)
                                                       : k_rope.get(t * R + x - (192 - R)));
  RaggedPrefill rp(fp8_config(f.p, DType::kBF16, 4));
  const PrefillOptions o = opts(true);
  rp.plan(f.p.qo_indptr.data(), f.p.kv_indptr.data(), f.p.batch(), o);
  HostTensor out(DType::kBF16, {f.p.total_q(), 4, 128}), lse(DType::kFP32, {f.p.total_q(), 4});
  out.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  TensorView lv = lse.view();
  rp.run_split_k(f.p.q.view(), k_nope.view(), k_rope.view(), f.p.v.view(), out.view(), &lv, f.descales());
  expect_matches_reference(f, o, out, lse, "split K");
}

// Capacity-sized buffers: rows past the plan's tokens are neither read (NaN there changes
// nothing) nor written; absent descales are 1.
TEST(E4M3CpuBackend, CapacityRowsAreIgnoredAndAbsentDescalesAreOne) {
  std::mt19937_64 rng(9);
  Fp8Problem f = make_fp8_problem(2, 2, 64, 64, {20, 0, 9}, {31, 4, 9}, rng);
  for (HostTensor* t : {&f.qd, &f.kd, &f.vd}) {
    for (int64_t i = 0; i < t->numel(); ++i) t->set(i, 1.0);
  }
  const int64_t extra = 5;
  HostTensor q(DType::kE4M3, {f.p.total_q() + extra, 2, 64}), k(DType::kE4M3, {f.p.total_kv() + extra, 2, 64}),
      v(DType::kE4M3, {f.p.total_kv() + extra, 2, 64});
  q.fill_bytes(0x7f);  // NaN everywhere, then the plan's rows copied in
  k.fill_bytes(0x7f);
  v.fill_bytes(0xff);
  std::memcpy(q.data(), f.p.q.data(), f.p.q.nbytes());
  std::memcpy(k.data(), f.p.k.data(), f.p.k.nbytes());
  std::memcpy(v.data(), f.p.v.data(), f.p.v.nbytes());
  PrefillConfig c = fp8_config(f.p, DType::kBF16, 8);
  c.max_q_tokens += extra;
  c.max_kv_tokens += extra;
  RaggedPrefill rp(c);
  rp.plan(f.p.qo_indptr.data(), f.p.kv_indptr.data(), f.p.batch(), opts(true));
  HostTensor out(DType::kBF16, {f.p.total_q() + extra, 2, 64}), lse(DType::kFP32, {f.p.total_q() + extra, 2});
  out.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  TensorView lv = lse.view();
  rp.run(q.view(), k.view(), v.view(), out.view(), &lv);  // no descales
  // The rows past the plan stay poisoned; the others match the reference (with factors 1).
  const std::vector<double> all = out.to_doubles();
  for (int64_t i = f.p.total_q() * 2 * 64; i < out.numel(); ++i) EXPECT_TRUE(std::isnan(all[i]));
  HostTensor head(DType::kBF16, {f.p.total_q(), 2, 64}), head_lse(DType::kFP32, {f.p.total_q(), 2});
  std::memcpy(head.data(), out.data(), head.nbytes());
  std::memcpy(head_lse.data(), lse.data(), head_lse.nbytes());
  expect_matches_reference(f, opts(true), head, head_lse, "capacity rows, descales absent");
}

// --- validation -----------------------------------------------------------------------------

class E4M3Validation : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(3);
    f_ = make_fp8_problem(4, 2, 64, 64, {10, 20}, {10, 30}, rng);
    rp_ = std::make_unique<RaggedPrefill>(fp8_config(f_.p, DType::kBF16, 4));
    rp_->plan(f_.p.qo_indptr.data(), f_.p.kv_indptr.data(), f_.p.batch(), opts(true));
    out_ = HostTensor(DType::kBF16, {f_.p.total_q(), 4, 64});
    out_.fill_bytes(0xAB);
  }
  // The call throws (kind, argument) and the output keeps its poison.
  ::testing::AssertionResult rejects(const TensorView& q, const TensorView& k, const TensorView& v,
                                     const TensorView& out, const Descales& d, ErrorKind kind, const std::string& arg,
                                     const std::string& text) {
    std::string msg;
    auto r = throws_error(
        [&] {
          try {
            rp_->run(q, k, v, out, nullptr, d);
          } catch (const Error& e) {
            msg = e.what();
            throw;
          }
        },
        kind, arg);
    if (!r) return r;
    if (msg.find(text) == std::string::npos) {
      return ::testing::AssertionFailure() << "message '" << msg << "' lacks '" << text << "'";
    }
    for (uint8_t b : out_.bytes())
      if (b != 0xAB) return ::testing::AssertionFailure() << "the rejected call wrote the output";
    return ::testing::AssertionSuccess();
  }
  Fp8Problem f_;
  std::unique_ptr<RaggedPrefill> rp_;
  HostTensor out_;
};

TEST_F(E4M3Validation, MixedInputDtypesNameTheSupportedCombinations) {
  HostTensor kb(DType::kBF16, {f_.p.total_kv(), 2, 64});
  EXPECT_TRUE(rejects(f_.p.q.view(), kb.view(), f_.p.v.view(), out_.view(), {}, ErrorKind::kTypeMismatch, "k",
                      "q, k and v share one dtype: bf16, fp16 or e4m3"));
  HostTensor vb(DType::kFP16, {f_.p.total_kv(), 2, 64});
  EXPECT_TRUE(rejects(f_.p.q.view(), f_.p.k.view(), vb.view(), out_.view(), {}, ErrorKind::kTypeMismatch, "v",
                      "(FP8: all three e4m3, output bf16 or fp16)"));
}

TEST_F(E4M3Validation, OutputDtypeMustBeTheConfigsOutDtype) {
  HostTensor o8(DType::kE4M3, {f_.p.total_q(), 4, 64});
  EXPECT_TRUE(rejects(f_.p.q.view(), f_.p.k.view(), f_.p.v.view(), o8.view(), {}, ErrorKind::kTypeMismatch, "out",
                      "not an output dtype of e4m3 inputs (bf16 or fp16)"));
  HostTensor o16(DType::kFP16, {f_.p.total_q(), 4, 64});
  EXPECT_TRUE(rejects(f_.p.q.view(), f_.p.k.view(), f_.p.v.view(), o16.view(), {}, ErrorKind::kTypeMismatch, "out",
                      "differs from the output dtype bf16 (config.out_dtype)"));
}

TEST_F(E4M3Validation, DescaleShapeDtypeAndDevice) {
  const TensorView q = f_.p.q.view(), k = f_.p.k.view(), v = f_.p.v.view(), o = out_.view();
  HostTensor short_rows(DType::kFP32, {1, 2});  // the plan has 2 sequences
  TensorView sv = short_rows.view();
  EXPECT_TRUE(rejects(q, k, v, o, Descales{&sv, nullptr, nullptr}, ErrorKind::kInvalidArgument, "q_descale",
                      "must be [>= batch_size, num_kv_heads] = [>= 2, 2]"));
  HostTensor wrong_heads(DType::kFP32, {2, 4});
  TensorView hv = wrong_heads.view();
  EXPECT_TRUE(rejects(q, k, v, o, Descales{nullptr, &hv, nullptr}, ErrorKind::kInvalidArgument, "k_descale",
                      "[>= batch_size, num_kv_heads]"));
  HostTensor half(DType::kBF16, {2, 2});
  TensorView bv = half.view();
  EXPECT_TRUE(rejects(q, k, v, o, Descales{nullptr, nullptr, &bv}, ErrorKind::kTypeMismatch, "v_descale",
                      "must be fp32"));
  HostTensor one_d(DType::kFP32, {4});
  TensorView dv1 = one_d.view();
  EXPECT_TRUE(rejects(q, k, v, o, Descales{&dv1, nullptr, nullptr}, ErrorKind::kInvalidArgument, "q_descale",
                      "expected a 2-D tensor"));
  HostTensor ok(DType::kFP32, {2, 2});
  TensorView on_gpu = ok.view(Device::cuda(0));
  EXPECT_TRUE(rejects(q, k, v, o, Descales{nullptr, &on_gpu, nullptr}, ErrorKind::kTypeMismatch, "k_descale",
                      "is on cuda:0 but q is on cpu"));
  // A larger buffer (max_batch rows, transposed strides) is fine.
  HostTensor big(DType::kFP32, {2, 8});  // [Hkv, max_batch] memory, read as [max_batch, Hkv]
  TensorView tv = big.view();
  std::swap(tv.shape[0], tv.shape[1]);
  std::swap(tv.strides[0], tv.strides[1]);
  EXPECT_NO_THROW(rp_->run(q, k, v, o, nullptr, Descales{&tv, &tv, &tv}));
}

TEST(E4M3ValidationConfig, DescalesBelongToE4M3InputsOnly) {
  std::mt19937_64 rng(4);
  AttnProblem p = make_problem(DType::kBF16, 2, 2, 64, 64, {5}, {5}, rng);
  PrefillConfig c = fp8_config(p, DType::kBF16, 1);
  c.dtype = DType::kBF16;
  RaggedPrefill rp(c);
  rp.plan(p.qo_indptr.data(), p.kv_indptr.data(), 1, opts(false));
  HostTensor out(DType::kBF16, {5, 2, 64}), d(DType::kFP32, {1, 2});
  TensorView dv = d.view();
  EXPECT_TRUE(throws_error([&] { rp.run(p.q.view(), p.k.view(), p.v.view(), out.view(), nullptr, Descales{&dv, nullptr, nullptr}); },
                           ErrorKind::kTypeMismatch, "q_descale"));
}

// Two heads of 64, one sequence of up to 8 tokens, e4m3 inputs.
PrefillConfig small_e4m3_config() {
  PrefillConfig c;
  c.num_qo_heads = c.num_kv_heads = 2;
  c.head_dim_qk = c.head_dim_vo = 64;
  c.max_batch = 1;
  c.max_q_tokens = c.max_kv_tokens = 8;
  c.dtype = DType::kE4M3;
  return c;
}

TEST(E4M3ValidationConfig, ConfigDtypesAndOutDtype) {
  PrefillConfig c = small_e4m3_config();
  c.out_dtype = DType::kE4M3;
  EXPECT_TRUE(throws_error([&] { RaggedPrefill rp(c); }, ErrorKind::kTypeMismatch, "config.out_dtype"));
  c.out_dtype = DType::kFP32;
  EXPECT_TRUE(throws_error([&] { RaggedPrefill rp(c); }, ErrorKind::kTypeMismatch, "config.out_dtype"));
  c.out_dtype = DType::kFP16;
  EXPECT_NO_THROW(RaggedPrefill rp(c));
  // 16-bit inputs ignore out_dtype: they write their own dtype.
  c.dtype = DType::kBF16;
  c.out_dtype = DType::kE4M3;
  EXPECT_NO_THROW(RaggedPrefill rp(c));
  c.dtype = DType::kFP32;
  EXPECT_TRUE(throws_error([&] { RaggedPrefill rp(c); }, ErrorKind::kTypeMismatch, "config.dtype"));
}

// With a bf16 output e4m3 inputs take the CPU path's bf16 products (decoded exactly into bf16);
// with an fp16 output, fp32 products.
TEST(E4M3CpuBackend, PathFollowsTheOutputDtype) {
  PrefillConfig c = small_e4m3_config();
  c.out_dtype = DType::kBF16;
  EXPECT_STREQ(RaggedPrefill(c).info().cpu_isa, cpu::cpu_isa_name(cpu::cpu_isa_in_use()));
  c.out_dtype = DType::kFP16;
  EXPECT_STREQ(RaggedPrefill(c).info().cpu_isa, "fp32");
}

// The one-shot call takes its output dtype from out.
TEST(E4M3OneShot, WritesTheOutputsDtype) {
  std::mt19937_64 rng(5);
  Fp8Problem f = make_fp8_problem(2, 2, 64, 64, {17, 3}, {40, 3}, rng);
  for (HostTensor* t : {&f.qd, &f.kd, &f.vd})  // the one-shot call takes no descales: factors 1
    for (int64_t i = 0; i < t->numel(); ++i) t->set(i, 1.0);
  for (DType od : {DType::kBF16, DType::kFP16}) {
    HostTensor out(od, {f.p.total_q(), 2, 64}), lse(DType::kFP32, {f.p.total_q(), 2});
    out.fill_bytes(0xFF);
    lse.fill_bytes(0xFF);
    TensorView lv = lse.view();
    ragged_prefill(f.p.q.view(), f.p.k.view(), f.p.v.view(), f.p.qo_indptr.data(), f.p.kv_indptr.data(), 2,
                   opts(true), out.view(), &lv);
    expect_matches_reference(f, opts(true), out, lse, std::string("one-shot -> ") + dtype_name(od));
  }
}

}  // namespace
}  // namespace test
}  // namespace mlakit
