// The up-projection GEMM behind the BLAS seam (src/mla/cuda/blas_cublas.cc, gemm_algos.cc):
// - every candidate that tune() may choose computes bit for bit what cuBLASLt's first choice
//   computes, on the MLA step's shapes (lda = 576 latent rows, n = heads x 256, k = 512), so a
//   tuned choice can never change a result (and the step stays deterministic across processes
//   whose timings pick differently);
// - after tune(), gemm_nt writes every output element, equal to the first choice's bits, and
//   within rounding of a float64 product.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "mla/blas.h"
#include "mlakit/mlakit.h"
#include "util/test_util.h"
#if MLAKIT_WITH_CUDA
#include "mla/cuda/gemm_algos.h"
#endif

namespace mlakit {
namespace test {
namespace {

#if !MLAKIT_WITH_CUDA
// Built without CUDA: cuBLASLt's side does not exist; the skip says so.
TEST(CudaMlaGemm, NeedsCuda) { GTEST_SKIP() << "mlakit was built without CUDA (no cuBLASLt GEMM to test)"; }
#else

struct GemmCase {
  HostTensor a, b, c;  // a [m, lda], b [n, k], c [m, n]
  blas::GemmArgs args{};
};

GemmCase make_case(int64_t m, int64_t heads, DType t, uint64_t seed) {
  const int64_t k = 512, lda = 576, n = heads * 256;
  std::mt19937_64 rng(seed);
  GemmCase g{HostTensor(t, {m, lda}), HostTensor(t, {n, k}), HostTensor(t, {m, n})};
  g.a.fill_normal(rng);
  g.b.fill_normal(rng, 0.05);
  g.args.m = m;
  g.args.n = n;
  g.args.k = k;
  g.args.lda = lda;
  g.args.ldb = k;
  g.args.ldc = n;
  g.args.dtype = t;
  return g;
}

// Tunes the classes up to `max_m` rows of g's shape, on scratch buffers a and c of max_m rows.
void tune_for(const GemmCase& g, int64_t max_m, void* a, void* c) {
  cuda::blas::TuneArgs t{};
  t.max_m = max_m;
  t.n = g.args.n;
  t.k = g.args.k;
  t.lda = g.args.lda;
  t.ldb = g.args.ldb;
  t.ldc = g.args.ldc;
  t.dtype = g.args.dtype;
  t.a = a;
  t.c = c;
  cuda::blas::tune(t, 0);
}

// Relative error of `got` (g's C, as copied back) against a float64 C = A B^T on `rows` (every
// column).
double sampled_error(const GemmCase& g, const HostTensor& got, std::initializer_list<int64_t> rows) {
  std::vector<double> ref, out;
  for (int64_t r : rows) {
    for (int64_t j = 0; j < g.args.n; ++j) {
      double s = 0;
      for (int64_t kk = 0; kk < g.args.k; ++kk) s += g.a.get(r * g.args.lda + kk) * g.b.get(j * g.args.k + kk);
      ref.push_back(s);
      out.push_back(got.get(r * g.args.n + j));
    }
  }
  return relative_error(out, ref);
}

class CudaMlaGemm : public ::testing::TestWithParam<DType> {};

TEST_P(CudaMlaGemm, EveryTunableCandidateComputesTheFirstChoicesBits) {
  MLAKIT_SKIP_IF_NO_GPU();
  const Device d = Device::cuda(0);
  cuda::blas::init(0);
  for (int64_t m : {1, 77, 1000, 4096, 8993}) {  // 8993: odd, its pool mixes other m's lists
    SCOPED_TRACE("m = " + std::to_string(m));
    GemmCase g = make_case(m, 16, GetParam(), 100 + static_cast<uint64_t>(m));
    DeviceTensor a(g.a, d), b(g.b, d);
    g.args.a = a.view().data;
    g.args.b = b.view().data;
    const std::vector<cuda::blas::GemmAlgo> cands = cuda::blas::tuned_candidates_for_test(g.args, 0);
    ASSERT_FALSE(cands.empty());
    std::vector<uint8_t> first;
    for (size_t i = 0; i < cands.size(); ++i) {
      SCOPED_TRACE("candidate " + std::to_string(i) + " of " + std::to_string(cands.size()));
      g.c.fill_bytes(0xff);  // NaN in both dtypes: an unwritten element cannot match
      DeviceTensor c(g.c, d);
      g.args.c = c.view().data;
      ASSERT_TRUE(cuda::blas::run_candidate_for_test(g.args, 0, cands[i], nullptr));
      synchronize(d);
      HostTensor got = g.c;
      c.copy_to(got);
      if (i == 0) {
        first = got.bytes();
        for (int64_t e = 0; e < got.numel(); ++e) ASSERT_TRUE(std::isfinite(got.get(e))) << "element " << e;
      } else {
        EXPECT_EQ(got.bytes(), first);
      }
    }
  }
}

TEST_P(CudaMlaGemm, TunedGemmMatchesFirstChoiceAndReference) {
  MLAKIT_SKIP_IF_NO_GPU();
  const Device d = Device::cuda(0);
  const int64_t max_m = 1500;
  GemmCase big = make_case(max_m, 16, GetParam(), 7);
  DeviceTensor scratch_a(big.a, d), scratch_c(big.c, d);
  tune_for(big, max_m, scratch_a.view().data, scratch_c.view().data);
  tune_for(big, max_m, scratch_a.view().data, scratch_c.view().data);  // already tuned: nothing changes
  for (int64_t m : {1, 300, 700, 1500}) {
    SCOPED_TRACE("m = " + std::to_string(m));
    GemmCase g = make_case(m, 16, GetParam(), 200 + static_cast<uint64_t>(m));
    DeviceTensor a(g.a, d), b(g.b, d);
    g.args.a = a.view().data;
    g.args.b = b.view().data;
    g.c.fill_bytes(0xff);
    DeviceTensor c(g.c, d), c0(g.c, d);
    g.args.c = c.view().data;
    blas::gemm_nt(g.args, d, nullptr);
    blas::GemmArgs first = g.args;
    first.c = c0.view().data;
    const std::vector<cuda::blas::GemmAlgo> cands = cuda::blas::tuned_candidates_for_test(g.args, 0);
    ASSERT_FALSE(cands.empty());
    ASSERT_TRUE(cuda::blas::run_candidate_for_test(first, 0, cands[0], nullptr));
    synchronize(d);
    HostTensor got = g.c, want = g.c;
    c.copy_to(got);
    c0.copy_to(want);
    EXPECT_EQ(got.bytes(), want.bytes()) << "tuned algorithm vs cuBLASLt's first choice";
    EXPECT_LE(sampled_error(g, got, {0, m / 2, m - 1}), 1e-2);
  }
}

// A weight that is a view 16 bytes into a larger allocation (its rows still 16-byte aligned, as
// the MLA step's checks require) is less aligned than the 256 bytes the tuned choices assume:
// the GEMM still runs (cuBLASLt's first choice for the real alignment when the cached one is
// rejected) and writes every element, within rounding of a float64 product.
TEST_P(CudaMlaGemm, WeightViewLessAlignedThanTheTunedChoices) {
  MLAKIT_SKIP_IF_NO_GPU();
  const Device d = Device::cuda(0);
  const int64_t m = 700;
  GemmCase g = make_case(m, 16, GetParam(), 31);
  HostTensor b_off(GetParam(), {g.args.n * g.args.k + 8});  // the weight starts 8 elements in
  std::memcpy(static_cast<unsigned char*>(b_off.data()) + 16, g.b.data(), g.b.nbytes());
  DeviceTensor a(g.a, d), b(b_off, d);
  GemmCase scratch = make_case(m, 16, GetParam(), 32);
  DeviceTensor sa(scratch.a, d), sc(scratch.c, d);
  tune_for(g, m, sa.view().data, sc.view().data);
  g.c.fill_bytes(0xff);
  DeviceTensor c(g.c, d);
  g.args.a = a.view().data;
  g.args.b = static_cast<const unsigned char*>(b.view().data) + 16;
  g.args.c = c.view().data;
  blas::gemm_nt(g.args, d, nullptr);
  synchronize(d);
  HostTensor got = g.c;
  c.copy_to(got);
  EXPECT_LE(sampled_error(g, got, {0, m / 3, m - 1}), 1e-2);
  for (int64_t e = 0; e < got.numel(); ++e) ASSERT_TRUE(std::isfinite(got.get(e))) << "element " << e;
}

// The values candidates are timed on: every one finite and normal, magnitudes in [1/16, 1), both
// signs, and varied (not a constant, whose low power draw could rank candidates differently).
TEST_P(CudaMlaGemm, TuningValuesAreFiniteAndVaried) {
  MLAKIT_SKIP_IF_NO_GPU();
  const Device d = Device::cuda(0);
  const int64_t n = 100003;  // odd: the grid-stride loop's last partial block
  HostTensor h(GetParam(), {n});
  h.fill_bytes(0xff);
  DeviceTensor t(h, d);
  cuda::blas::fill_tuning_values(t.view().data, n - 1, GetParam(), 7, nullptr);  // the last stays
  synchronize(d);
  t.copy_to(h);
  int64_t negative = 0;
  std::vector<double> seen;
  for (int64_t e = 0; e < n - 1; ++e) {
    const double v = h.get(e);
    ASSERT_TRUE(std::isfinite(v)) << "element " << e;
    ASSERT_GE(std::fabs(v), 1.0 / 16) << "element " << e;
    ASSERT_LT(std::fabs(v), 1.0) << "element " << e;
    negative += v < 0;
    if (e < 4096) seen.push_back(v);
  }
  EXPECT_TRUE(std::isnan(h.get(n - 1))) << "wrote past count";
  EXPECT_GT(negative, n / 3);
  EXPECT_LT(negative, 2 * n / 3);
  std::sort(seen.begin(), seen.end());
  EXPECT_GT(std::unique(seen.begin(), seen.end()) - seen.begin(), 400);  // bf16 has 1024 such values
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaMlaGemm, ::testing::Values(DType::kBF16, DType::kFP16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(i.param == DType::kBF16 ? "bf16" : "fp16");
                         });
#endif  // MLAKIT_WITH_CUDA

}  // namespace
}  // namespace test
}  // namespace mlakit
