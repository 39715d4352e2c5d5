// The amx path (src/cpu/attention_amx.cc, gemm_bf16_amx.cc, amx_tiles.h): TDPBF16PS on random
// tiles against float64, and the attention on lengths and head dims at the edges of its tiles
// (16 keys or rows), k-steps (32 dims or keys) and chunks (128 keys), against the float64
// reference and the avx512bf16 path. They run where the amx path is available: on a CPU whose
// tiles the OS grants, or in a build that emulates the tiles (MLAKIT_CPU_AMX_EMULATE, which
// scripts/run-tests builds on CPUs with AVX-512 BF16); elsewhere they skip, saying why.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attention_cases.h"
#include "cpu/cpu_isa.h"
#include "cpu/half_convert.h"
#include "isa_env.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include "cpu/amx_tiles.h"
#define MLAKIT_TEST_HAVE_TILES 1
#endif

namespace mlakit {
namespace test {
namespace {

using cpu::CpuIsa;

#define MLAKIT_SKIP_IF_NO_AMX()                                                                          \
  do {                                                                                                   \
    if (!cpu::cpu_isa_available(CpuIsa::kAmx)) {                                                         \
      std::printf("[  SKIPPED ] no amx path here: the CPU or OS grants no AMX tiles and this build does " \
                  "not emulate them (MLAKIT_CPU_AMX_EMULATE)\n");                                         \
      std::fflush(stdout);                                                                               \
      GTEST_SKIP() << "no amx path here";                                                                \
    }                                                                                                    \
  } while (0)

#ifdef MLAKIT_TEST_HAVE_TILES
// C (16 x 16 fp32, loaded) += A (16 x 32 bf16) B (16 pairs x 16 columns), through the tiles.
void tile_product(const uint16_t* a, const uint32_t* b, float* c) {
  cpu::amx::tile_config();
  cpu::amx::tile_load<0>(c, 64);
  cpu::amx::tile_load<4>(a, 64);
  cpu::amx::tile_load<6>(b, 64);
  cpu::amx::tile_dp<0, 4, 6>();
  cpu::amx::tile_store<0>(c, 64);
  cpu::amx::tile_release();
}

TEST(AmxTiles, Tdpbf16psMatchesFloat64) {
  MLAKIT_SKIP_IF_NO_AMX();
  std::mt19937_64 rng(47);
  std::normal_distribution<float> nd;
  for (int rep = 0; rep < 4; ++rep) {
    uint16_t a[16 * 32];
    uint32_t b[16 * 16];
    float c[16 * 16];
    for (auto& x : a) x = cpu::float_to_bf16(nd(rng));
    for (auto& x : b) x = cpu::float_to_bf16(nd(rng)) | (static_cast<uint32_t>(cpu::float_to_bf16(nd(rng))) << 16);
    for (auto& x : c) x = rep == 0 ? 0.0f : nd(rng);
    float want_c[16 * 16];
    std::memcpy(want_c, c, sizeof(c));
    tile_product(a, b, c);
    for (int m = 0; m < 16; ++m) {
      for (int n = 0; n < 16; ++n) {
        double want = want_c[m * 16 + n], mag = std::fabs(want);
        for (int x = 0; x < 16; ++x) {
          for (int h = 0; h < 2; ++h) {
            const double p = static_cast<double>(cpu::bf16_to_float(a[m * 32 + 2 * x + h])) *
                             cpu::bf16_to_float(static_cast<uint16_t>(b[x * 16 + n] >> (16 * h)));
            want += p;
            mag += std::fabs(p);
          }
        }
        // 33 additions rounded in fp32: within 33 half-ulps of the magnitudes added.
        EXPECT_NEAR(c[m * 16 + n], want, 33 * 0x1p-24 * mag + 1e-30) << "C[" << m << "][" << n << "], rep " << rep;
      }
    }
  }
}
#endif

// Where the CPU reports AMX tiles and this build does not emulate them, the OS grants them to
// the process and the amx path is the best path.
TEST(AmxHardware, TilesGrantedWhereTheCpuHasThem) {
  std::ifstream f("/proc/cpuinfo");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string info = ss.str();
  const bool flags = info.find(" amx_bf16") != std::string::npos && info.find(" amx_tile") != std::string::npos;
  if (!flags || cpu::cpu_amx_emulated()) {
    std::printf("[  SKIPPED ] %s\n", flags ? "this build emulates the tiles" : "this CPU reports no AMX tiles (/proc/cpuinfo)");
    std::fflush(stdout);
    GTEST_SKIP() << "needs a CPU with AMX and a build that does not emulate it";
  }
  EXPECT_TRUE(cpu::cpu_has_amx()) << "/proc/cpuinfo lists amx_bf16 and amx_tile, but arch_prctl gave no tiles";
  EXPECT_TRUE(cpu::cpu_isa_available(CpuIsa::kAmx));
  EXPECT_EQ(cpu::cpu_isa_best(), CpuIsa::kAmx);
}

struct PathRun {
  HostTensor out, lse;
};

PathRun run_on(const char* isa, const AttnProblem& p, const PrefillOptions& o) {
  IsaEnv env(isa);
  RaggedPrefill rp(cpu_config_for(p, DType::kBF16, p.batch(), std::max<int64_t>(1, p.total_q()),
                                  std::max<int64_t>(1, p.total_kv())));
  EXPECT_STREQ(rp.info().cpu_isa, isa);
  rp.plan(p.qo_indptr.data(), p.kv_indptr.data(), p.batch(), o);
  PathRun r{HostTensor(DType::kBF16, {p.total_q(), p.heads, p.dvo}), HostTensor(DType::kFP32, {p.total_q(), p.heads})};
  r.out.fill_bytes(0xFF);  // NaN: what is not written fails the checks
  r.lse.fill_bytes(0xFF);
  TensorView lse = r.lse.view();
  rp.run(p.q.view(), p.k.view(), p.v.view(), r.out.view(), &lse);
  return r;
}

struct EdgeCase {
  int heads, kv_heads, dqk, dvo;
  PrefillOptions options;
};

TEST(AmxAttention, TileAndChunkEdgesMatchReferenceAndTheAvx512Path) {
  MLAKIT_SKIP_IF_NO_AMX();
  // (80, 48): head dims that are not whole k-steps (keys copied, not read in place) and an odd
  // count of 16-dim tiles of V; (32, 16): one k-step, one V tile.
  const EdgeCase cases[] = {
      {4, 2, 192, 128, opts(true)},  {2, 2, 192, 128, opts(false, 70)}, {3, 1, 80, 48, opts(true)},
      {2, 1, 64, 64, opts(false)},   {2, 2, 32, 16, opts(true, 40, 15.0f)},
  };
  // Rows and keys at 16 (tiles), 32 (k-steps of O) and 128 (chunks) and past them; kv longer than
  // q (context before the new rows) and far longer (several chunks, both S^T buffers in turn).
  const std::vector<int32_t> q_lens = {1, 15, 16, 17, 33, 64, 65, 150};
  const std::vector<int32_t> kv_extra = {0, 1, 16, 31, 127, 128, 300, 0};
  std::mt19937_64 rng(4711);
  for (const EdgeCase& c : cases) {
    SCOPED_TRACE("dims " + std::to_string(c.dqk) + "/" + std::to_string(c.dvo) + " causal " +
                 std::to_string(c.options.causal) + " window " + std::to_string(c.options.window_left));
    std::vector<int32_t> kv_lens;
    for (size_t i = 0; i < q_lens.size(); ++i) kv_lens.push_back(q_lens[i] + kv_extra[i]);
    const AttnProblem p = make_problem(DType::kBF16, c.heads, c.kv_heads, c.dqk, c.dvo, q_lens, kv_lens, rng);
    const PathRun got = run_on("amx", p, c.options);
    const RefResult ref = reference_result(p, c.options);
    const std::vector<double> out = got.out.to_doubles();
    for (size_t i = 0; i < out.size(); ++i) ASSERT_FALSE(std::isnan(out[i])) << "out[" << i << "] not written";
    EXPECT_LE(relative_error(out, ref.out.to_doubles()), 1e-2);
    std::vector<double> lg, lw;
    for (int64_t r = 0; r < p.total_q() * p.heads; ++r) {
      ASSERT_TRUE(std::isfinite(got.lse.get(r))) << "lse row " << r;
      lg.push_back(got.lse.get(r));
      lw.push_back(ref.lse.get(r));
    }
    EXPECT_LE(relative_error(lg, lw), 1e-5);
    if (cpu::cpu_isa_available(CpuIsa::kAvx512Bf16)) {
      const PathRun avx = run_on("avx512bf16", p, c.options);
      EXPECT_LE(relative_error(out, avx.out.to_doubles()), 1e-2) << "the amx and avx512bf16 paths disagree";
    }
    EXPECT_EQ(got.out.bytes(), run_on("amx", p, c.options).out.bytes()) << "a second run differs";
  }
}

}  // namespace
}  // namespace test
}  // namespace mlakit
