// cpu::gemm_nt_bf16 (the MLA up-projection's bf16 product) against a float64 product: row and
// column counts off the 6 x 64 blocks, strided rows, nothing written past n, bitwise repeat, and
// rows the same whatever m. Skips, saying why, where the CPU lacks AVX-512 BF16.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "cpu/cpu_isa.h"
#include "cpu/gemm_bf16.h"
#include "cpu/half_convert.h"

namespace mlakit {
namespace test {
namespace {

struct Mat {
  int64_t rows, cols, ld;
  std::vector<uint16_t> bits;
  Mat(int64_t r, int64_t c, int64_t pad, std::mt19937_64& rng) : rows(r), cols(c), ld(c + pad), bits(r * (c + pad)) {
    std::normal_distribution<float> nd;
    for (auto& b : bits) b = cpu::float_to_bf16(nd(rng));
  }
  double at(int64_t r, int64_t c) const { return cpu::bf16_to_float(bits[r * ld + c]); }
};

TEST(GemmBf16, MatchesFloat64ProductAndWritesOnlyC) {
  if (!cpu::gemm_nt_bf16_available(512)) {
    std::printf("[  SKIPPED ] no bf16 product here (CPU path %s)\n", cpu::cpu_isa_name(cpu::cpu_isa_in_use()));
    GTEST_SKIP() << "no AVX-512 BF16 path";
  }
  EXPECT_FALSE(cpu::gemm_nt_bf16_available(511));  // odd k: the pairs would run past a row
  std::mt19937_64 rng(5);
  for (int64_t m : {1, 5, 7, 193, 400}) {
    for (int64_t n : {1, 63, 64, 65, 200}) {
      for (int64_t k : {2, 64, 512}) {
        SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
        const Mat a(m, k, 6, rng), b(n, k, 2, rng);
        const int64_t ldc = n + 5;
        std::vector<uint16_t> c(m * ldc, 0x7FC1);  // a NaN sentinel everywhere
        cpu::gemm_nt_bf16(m, n, k, a.bits.data(), a.ld, b.bits.data(), b.ld, c.data(), ldc);
        double num = 0, den = 0;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < ldc; ++j) {
            const uint16_t got = c[i * ldc + j];
            if (j >= n) {
              ASSERT_EQ(got, 0x7FC1) << "wrote past n at (" << i << ", " << j << ")";
              continue;
            }
            double want = 0;
            for (int64_t x = 0; x < k; ++x) want += a.at(i, x) * b.at(j, x);
            const double g = cpu::bf16_to_float(got);
            ASSERT_FALSE(std::isnan(g)) << "(" << i << ", " << j << ") not written";
            num += (g - want) * (g - want);
            den += want * want;
          }
        }
        EXPECT_LE(std::sqrt(num / den), 5e-3);
        // Bitwise repeat, and the first rows alone give the same bits.
        std::vector<uint16_t> again(m * ldc, 0x7FC1);
        cpu::gemm_nt_bf16(m, n, k, a.bits.data(), a.ld, b.bits.data(), b.ld, again.data(), ldc);
        EXPECT_EQ(c, again);
        const int64_t m1 = std::max<int64_t>(1, m / 3);
        std::vector<uint16_t> part(m1 * ldc, 0x7FC1);
        cpu::gemm_nt_bf16(m1, n, k, a.bits.data(), a.ld, b.bits.data(), b.ld, part.data(), ldc);
        EXPECT_TRUE(std::equal(part.begin(), part.end(), c.begin()));
      }
    }
  }
}

}  // namespace
}  // namespace test
}  // namespace mlakit
