// The CPU backend's paths (amx, avx512bf16, fp32), each forced with MLAKIT_CPU_ISA inside the
// test, against the float64 reference: every dtype, the three head-dim pairs, causal, window,
// soft cap, GQA, ragged lengths with 0 / 1 / odd / past-a-tile, strided views. A path this
// machine lacks skips, saying why. Also: repeated runs bitwise equal, a sequence's result the
// same alone and inside a batch, library_info() and PlanInfo::cpu_isa.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "attention_cases.h"
#include "cpu/cpu_isa.h"
#include "isa_env.h"
#include "mlakit/runtime.h"

namespace mlakit {
namespace test {
namespace {

using cpu::CpuIsa;

#define MLAKIT_SKIP_IF_NO_ISA(isa)                                                             \
  do {                                                                                         \
    if (!cpu::cpu_isa_available(isa)) {                                                        \
      std::printf("[  SKIPPED ] the %s path is not available here (%s); the best here is %s\n",  \
                  cpu::cpu_isa_name(isa),                                                      \
                  isa == CpuIsa::kAmx ? "the CPU or OS grants no AMX tiles" : "the CPU or OS lacks it", \
                  cpu::cpu_isa_name(cpu::cpu_isa_best()));                                     \
      std::fflush(stdout);                                                                     \
      GTEST_SKIP() << "no " << cpu::cpu_isa_name(isa) << " on this CPU";                       \
    }                                                                                          \
  } while (0)

// Capacities of the problem itself (at least 1, so empty problems construct).
PrefillConfig config_for(const AttnProblem& p, DType dtype) {
  return cpu_config_for(p, dtype, std::max(1, p.batch()), std::max<int64_t>(1, p.total_q()),
                        std::max<int64_t>(1, p.total_kv()));
}

struct Result {
  HostTensor out, lse;
};

// Out and lse poisoned (all-ones bytes are NaN in every dtype) before the run.
Result run(const RaggedPrefill& rp, const AttnProblem& p, const TensorView* q = nullptr,
           const TensorView* k = nullptr, const TensorView* v = nullptr) {
  Result r{HostTensor(p.q.dtype(), {p.total_q(), p.heads, p.dvo}),
           HostTensor(DType::kFP32, {p.total_q(), p.heads})};
  r.out.fill_bytes(0xFF);
  r.lse.fill_bytes(0xFF);
  TensorView lse = r.lse.view();
  rp.run(q ? *q : p.q.view(), k ? *k : p.k.view(), v ? *v : p.v.view(), r.out.view(), &lse);
  return r;
}

void expect_matches_reference(const AttnProblem& p, const PrefillOptions& o, const Result& got) {
  const RefResult ref = reference_result(p, o);
  const std::vector<double> out = got.out.to_doubles();
  for (size_t i = 0; i < out.size(); ++i) ASSERT_FALSE(std::isnan(out[i])) << "out[" << i << "] not written";
  std::vector<double> lg, lw;
  for (int64_t r = 0; r < p.total_q() * p.heads; ++r) {
    const double w = ref.lse.get(r), g = got.lse.get(r);
    if (std::isinf(w)) {
      EXPECT_EQ(g, -INFINITY) << "lse row " << r;
      for (int d = 0; d < p.dvo; ++d) EXPECT_EQ(out[r * p.dvo + d], 0.0) << "row " << r;
    } else {
      ASSERT_TRUE(std::isfinite(g)) << "lse row " << r << " = " << g;
      lg.push_back(g);
      lw.push_back(w);
    }
  }
  EXPECT_LE(relative_error(lg, lw), 1e-5);
  EXPECT_LE(relative_error(out, ref.out.to_doubles()), p.q.dtype() == DType::kBF16 ? 1e-2 : 2e-3);
}

struct Case {
  const char* name;
  int heads, kv_heads, dqk, dvo;
  PrefillOptions options;
};

const Case kCases[] = {
    {"mla_causal", 4, 4, 192, 128, opts(true)},
    {"mla_noncausal_gqa", 4, 1, 192, 128, opts(false)},
    {"mla_window_softcap", 2, 2, 192, 128, opts(true, 70, 20.0f)},
    {"d128_causal_gqa", 8, 2, 128, 128, opts(true)},
    {"d128_window", 2, 1, 128, 128, opts(false, 45)},
    {"d64_softcap_scale", 4, 2, 64, 64, opts(true, -1, 3.0f, 0.2f)},
    {"d64_noncausal", 2, 2, 64, 64, opts(false)},
    {"odd_dims", 3, 1, 19, 13, opts(true, 33)},
};

CpuIsa isa_of(int i) { return static_cast<CpuIsa>(i); }

class CpuIsaPath : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(CpuIsaPath, MatchesReferenceDeterministicAndBatchInvariant) {
  const CpuIsa isa = isa_of(std::get<0>(GetParam()));
  const DType dtype = std::get<1>(GetParam());
  MLAKIT_SKIP_IF_NO_ISA(isa);
  IsaEnv env(cpu::cpu_isa_name(isa));
  int seed = 0;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    std::mt19937_64 rng(0x15a + 31 * ++seed + static_cast<int>(dtype) * 7 + static_cast<int>(isa) * 1000);
    // 0, 1, odd and past-a-tile lengths, q shorter and longer than kv.
    std::vector<int32_t> ql = make_random_lengths(6, rng, {0, 1, 3, 31, 63, 64, 65, 129, 150});
    ql[0] = 150;
    ql[1] = 1;
    ql[2] = 0;
    ql[5] = 150;
    const std::vector<int32_t> kl = paired_kv_lengths(ql, rng, {-20, 0, 0, 7, 90});
    const AttnProblem p = make_problem(dtype, c.heads, c.kv_heads, c.dqk, c.dvo, ql, kl, rng);
    RaggedPrefill rp(config_for(p, dtype));
    // bf16 inputs take the path's bf16 products; fp16 inputs keep fp32 products.
    const char* expect = dtype == DType::kBF16 ? cpu::cpu_isa_name(isa) : "fp32";
    EXPECT_STREQ(rp.info().cpu_isa, expect);
    rp.plan(p.qo_indptr.data(), p.kv_indptr.data(), p.batch(), c.options);
    const Result a = run(rp, p);
    expect_matches_reference(p, c.options, a);
    const Result b = run(rp, p);
    EXPECT_EQ(a.out.bytes(), b.out.bytes()) << "a second run differs";
    EXPECT_EQ(a.lse.bytes(), b.lse.bytes());

    // The last sequence (150 q rows, past two tiles) alone gives the same bits as in the batch.
    const int s = p.batch() - 1;
    const int64_t qs = p.qo_indptr[s], ks = p.kv_indptr[s];
    AttnProblem one = make_problem(dtype, c.heads, c.kv_heads, c.dqk, c.dvo, {ql[s]}, {kl[s]}, rng);
    for (int64_t i = 0; i < one.q.numel(); ++i) one.q.set(i, p.q.get(qs * c.heads * c.dqk + i));
    for (int64_t i = 0; i < one.k.numel(); ++i) one.k.set(i, p.k.get(ks * c.kv_heads * c.dqk + i));
    for (int64_t i = 0; i < one.v.numel(); ++i) one.v.set(i, p.v.get(ks * c.kv_heads * c.dvo + i));
    RaggedPrefill rp1(config_for(one, dtype));
    rp1.plan(one.qo_indptr.data(), one.kv_indptr.data(), 1, c.options);
    const Result alone = run(rp1, one);
    const size_t row_bytes = static_cast<size_t>(c.heads * c.dvo) * dtype_size(dtype);
    ASSERT_EQ(alone.out.nbytes(), static_cast<size_t>(ql[s]) * row_bytes);
    EXPECT_TRUE(std::equal(alone.out.bytes().begin(), alone.out.bytes().end(),
                           a.out.bytes().begin() + static_cast<size_t>(qs) * row_bytes))
        << "the last sequence alone differs from the same sequence in the batch";
  }
}

TEST_P(CpuIsaPath, StridedViewsOfWiderBuffers) {
  const CpuIsa isa = isa_of(std::get<0>(GetParam()));
  const DType dtype = std::get<1>(GetParam());
  MLAKIT_SKIP_IF_NO_ISA(isa);
  IsaEnv env(cpu::cpu_isa_name(isa));
  std::mt19937_64 rng(77 + static_cast<int>(isa));
  const int H = 2, Hkv = 1, dqk = 192, dvo = 128;
  const AttnProblem p = make_problem(dtype, H, Hkv, dqk, dvo, {40, 77, 3}, {90, 77, 130}, rng);
  const int64_t pad = 24;  // per-token padding, NaN: reading it would poison the result
  auto widen = [&](const HostTensor& src, int64_t heads, int64_t dim) {
    HostTensor wide(src.dtype(), {src.shape()[0], heads * dim + pad});
    wide.fill_bytes(0xFF);
    for (int64_t t = 0; t < src.shape()[0]; ++t)
      for (int64_t i = 0; i < heads * dim; ++i) wide.set(t * (heads * dim + pad) + i, src.get(t * heads * dim + i));
    return wide;
  };
  const HostTensor qw = widen(p.q, H, dqk), kw = widen(p.k, Hkv, dqk), vw = widen(p.v, Hkv, dvo);
  auto view = [&](const HostTensor& w, int64_t heads, int64_t dim) {
    return TensorView(const_cast<void*>(w.data()), w.dtype(), {w.shape()[0], heads, dim}, {heads * dim + pad, dim, 1});
  };
  const TensorView qv = view(qw, H, dqk), kv = view(kw, Hkv, dqk), vv = view(vw, Hkv, dvo);
  const PrefillOptions o = opts(true);
  RaggedPrefill rp(config_for(p, dtype));
  rp.plan(p.qo_indptr.data(), p.kv_indptr.data(), p.batch(), o);
  const Result strided = run(rp, p, &qv, &kv, &vv);
  expect_matches_reference(p, o, strided);
  EXPECT_EQ(strided.out.bytes(), run(rp, p).out.bytes()) << "strided and contiguous runs differ";
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuIsaPath,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values(DType::kBF16, DType::kFP16)),
                         [](const ::testing::TestParamInfo<std::tuple<int, DType>>& i) {
                           return std::string(cpu::cpu_isa_name(isa_of(std::get<0>(i.param)))) + "_" +
                                  dtype_name(std::get<1>(i.param));
                         });

TEST(CpuIsa, PathsAgreeWithinRounding) {
  // The bf16 paths and the fp32 path differ only by where products round: their outputs are
  // close to each other, not just each close to the reference.
  std::mt19937_64 rng(91);
  const AttnProblem p = make_problem(DType::kBF16, 4, 2, 192, 128, {200, 1, 65}, {260, 1, 65}, rng);
  std::vector<std::vector<double>> outs;
  for (CpuIsa isa : {CpuIsa::kFp32, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (!cpu::cpu_isa_available(isa)) continue;
    IsaEnv env(cpu::cpu_isa_name(isa));
    RaggedPrefill rp(config_for(p, DType::kBF16));
    rp.plan(p.qo_indptr.data(), p.kv_indptr.data(), p.batch(), opts(true));
    outs.push_back(run(rp, p).out.to_doubles());
  }
  for (size_t i = 1; i < outs.size(); ++i) EXPECT_LE(relative_error(outs[i], outs[0]), 1e-2);
}

TEST(CpuIsa, UnknownValueIsRejectedByName) {
  IsaEnv env("avx9000");
  PrefillConfig c;
  c.num_qo_heads = c.num_kv_heads = 1;
  c.head_dim_qk = c.head_dim_vo = 64;
  c.max_batch = 1;
  c.max_q_tokens = c.max_kv_tokens = 8;
  EXPECT_TRUE(throws_error([&] { RaggedPrefill rp(c); }, ErrorKind::kInvalidArgument, "MLAKIT_CPU_ISA"));
  EXPECT_TRUE(throws_error([] { library_info(); }, ErrorKind::kInvalidArgument, "MLAKIT_CPU_ISA"));
}

TEST(CpuIsa, ForcedPathMissingHereFallsToTheBestBelowIt) {
  for (CpuIsa isa : {CpuIsa::kFp32, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    IsaEnv env(cpu::cpu_isa_name(isa));
    CpuIsa expect = isa;
    while (!cpu::cpu_isa_available(expect)) expect = static_cast<CpuIsa>(static_cast<int>(expect) - 1);
    const LibraryInfo info = library_info();
    EXPECT_EQ(info.cpu_isa, cpu::cpu_isa_name(expect));
    EXPECT_EQ(info.cpu_isa_requested, cpu::cpu_isa_name(isa));
    ASSERT_EQ(info.cpu_products.size(), 3u);
    for (const LibraryInfo::Products& pr : info.cpu_products)
      EXPECT_EQ(pr.isa, pr.dtype == DType::kFP16 ? "fp32" : cpu::cpu_isa_name(expect)) << dtype_name(pr.dtype);
  }
  // Every AMX CPU has AVX-512 BF16 (the detection requires both): there the bf16 path runs.
  if (cpu::cpu_has_amx()) EXPECT_TRUE(cpu::cpu_isa_available(CpuIsa::kAvx512Bf16));
  EXPECT_EQ(library_info().cpu_has_amx, cpu::cpu_has_amx());
}

TEST(CpuIsa, LibraryInfoDescribesThisBuild) {
  IsaEnv env(nullptr);
  const LibraryInfo info = library_info();
  EXPECT_EQ(info.version, "0.1.0");
  EXPECT_EQ(info.built_with_cuda, built_with_cuda());
  EXPECT_EQ(info.cpu_isa, info.cpu_isa_best);
  EXPECT_EQ(info.cpu_isa_requested, "");
  ASSERT_FALSE(info.backends.empty());
  EXPECT_EQ(info.backends[0].name, "cpu");
  EXPECT_EQ(info.backends[0].max_head_dim, 512);
  EXPECT_TRUE(info.backends[0].shapes.empty());
  // The CPU backend takes the largest head dims it reports, and rejects one past them.
  PrefillConfig c;
  c.num_qo_heads = c.num_kv_heads = 1;
  c.head_dim_qk = c.head_dim_vo = info.backends[0].max_head_dim;
  c.max_batch = 1;
  c.max_q_tokens = c.max_kv_tokens = 8;
  EXPECT_NO_THROW(RaggedPrefill{c});
  c.head_dim_qk += 1;
  EXPECT_TRUE(throws_error([&] { RaggedPrefill rp(c); }, ErrorKind::kUnsupported, "config.head_dim_qk"));
  if (!info.built_with_cuda) {
    EXPECT_EQ(info.backends.size(), 1u);
    return;
  }
  // With CUDA: the sm80 kernels (and the sm90 ones when built), each with its shapes,
  // (192, 128) bf16 among them.
  ASSERT_GE(info.backends.size(), 2u);
  EXPECT_EQ(info.backends[1].name, "cuda sm80");
  for (size_t i = 1; i < info.backends.size(); ++i) {
    const BackendInfo& b = info.backends[i];
    EXPECT_EQ(b.max_head_dim, 0);
    // Its dtypes are exactly those of its shapes.
    for (DType t : b.dtypes)
      EXPECT_TRUE(std::any_of(b.shapes.begin(), b.shapes.end(), [t](const KernelShape& k) { return k.dtype == t; }));
    for (const KernelShape& k : b.shapes) EXPECT_NE(std::find(b.dtypes.begin(), b.dtypes.end(), k.dtype), b.dtypes.end());
    bool has_mla = false;
    for (const KernelShape& s : b.shapes)
      has_mla |= s.dtype == DType::kBF16 && s.head_dim_qk == 192 && s.head_dim_vo == 128;
    EXPECT_TRUE(has_mla) << b.name;
  }
}

}  // namespace
}  // namespace test
}  // namespace mlakit
