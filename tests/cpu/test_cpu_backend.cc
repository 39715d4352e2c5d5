// RaggedPrefill on Device::cpu() against the float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attention_cases.h"

namespace mlakit {
namespace test {
namespace {

struct BackendOut {
  HostTensor out, lse;
};

// Runs the planned object on p, with out/lse poisoned (all-ones bytes are NaN in bf16, fp16
// and fp32) so that any entry left unwritten is caught.
BackendOut run_backend(const RaggedPrefill& rp, const AttnProblem& p) {
  BackendOut r{HostTensor(p.q.dtype(), {p.total_q(), p.heads, p.dvo}),
               HostTensor(DType::kFP32, {p.total_q(), p.heads})};
  r.out.fill_bytes(0xFF);
  r.lse.fill_bytes(0xFF);
  TensorView lse = r.lse.view();
  rp.run(p.q.view(), p.k.view(), p.v.view(), r.out.view(), &lse);
  return r;
}

// Full comparison with the reference: nothing left NaN, rows without keys exactly 0 / -inf,
// output and lse relative errors within tolerance. Returns the output relative error.
double check_vs_reference(const AttnProblem& p, const PrefillOptions& o, const BackendOut& got,
                          double tol) {
  const RefResult ref = reference_result(p, o);
  const std::vector<double> out = got.out.to_doubles();
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) {
      ADD_FAILURE() << "out[" << i << "] is NaN (not written)";
      return INFINITY;
    }
  }
  std::vector<double> lse_got, lse_want;
  for (int64_t r = 0; r < p.total_q() * p.heads; ++r) {
    const double w = ref.lse.get(r), g = got.lse.get(r);
    if (std::isinf(w)) {
      EXPECT_EQ(g, -std::numeric_limits<double>::infinity()) << "lse row " << r;
      for (int d = 0; d < p.dvo; ++d) EXPECT_EQ(out[r * p.dvo + d], 0.0) << "row " << r;
    } else {
      EXPECT_FALSE(std::isnan(g) || std::isinf(g)) << "lse row " << r << " = " << g;
      lse_got.push_back(g);
      lse_want.push_back(w);
    }
  }
  EXPECT_LE(relative_error(lse_got, lse_want), 1e-5);
  const double err = relative_error(out, ref.out.to_doubles());
  EXPECT_LE(err, tol);
  return err;
}

double tolerance(DType t) { return t == DType::kBF16 ? 1e-2 : 2e-3; }

struct BackendCase {
  const char* name;
  int heads, kv_heads, dqk, dvo;
  PrefillOptions options;
};

class CpuBackend
    : public ::testing::TestWithParam<std::tuple<BackendCase, DType>> {};

TEST_P(CpuBackend, MatchesReference) {
  const BackendCase& c = std::get<0>(GetParam());
  const DType dtype = std::get<1>(GetParam());
  std::mt19937_64 rng(0xc0ffee + c.dqk * 3 + c.heads * 17 + static_cast<int>(dtype) * 1000 +
                      c.options.window_left * 5 + (c.options.causal ? 1 : 0) +
                      static_cast<int>(c.options.logits_soft_cap * 10));
  // 0, 1, odd, and lengths that cross the 64-row tile edge (63/64/65, > 128).
  std::vector<int32_t> ql = make_random_lengths(5, rng, {0, 1, 3, 31, 63, 64, 65, 129, 150});
  ql[0] = 150;
  ql[1] = 1;
  const std::vector<int32_t> kl = paired_kv_lengths(ql, rng, {-20, 0, 0, 7, 90});
  const AttnProblem p = make_problem(dtype, c.heads, c.kv_heads, c.dqk, c.dvo, ql, kl, rng);
  RaggedPrefill rp(cpu_config_for(p, dtype, p.batch(), p.total_q(), p.total_kv()));
  rp.plan(p.qo_indptr.data(), p.kv_indptr.data(), p.batch(), c.options);
  const BackendOut a = run_backend(rp, p);
  const double err = check_vs_reference(p, c.options, a, tolerance(dtype));
  RecordProperty("relative_error", std::to_string(err));
  // Deterministic: a second run is bitwise identical.
  const BackendOut b = run_backend(rp, p);
  EXPECT_EQ(a.out.bytes(), b.out.bytes());
  EXPECT_EQ(a.lse.bytes(), b.lse.bytes());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CpuBackend,
    ::testing::Combine(
        ::testing::Values(BackendCase{"mla_causal", 4, 4, 192, 128, opts(true)},
                          BackendCase{"mla_noncausal_gqa", 4, 1, 192, 128, opts(false)},
                          BackendCase{"d128_causal_gqa_window", 8, 2, 128, 128, opts(true, 37)},
                          BackendCase{"d64_noncausal_window", 2, 2, 64, 64, opts(false, 20)},
                          BackendCase{"d64_softcap_scale", 4, 2, 64, 64, opts(true, -1, 3.0f, 0.2f)},
                          BackendCase{"mla_softcap", 2, 1, 192, 128, opts(true, 70, 20.0f)}),
        ::testing::Values(DType::kBF16, DType::kFP16)),
    [](const ::testing::TestParamInfo<std::tuple<BackendCase, DType>>& i) {
      return std::string(std::get<0>(i.param).name) + "_" + dtype_name(std::get<1>(i.param));
    });

TEST(CpuBackendPlan, OnePlanManyLayers) {
  std::mt19937_64 rng(101);
  AttnProblem p = make_problem(DType::kBF16, 4, 4, 192, 128, {70, 1, 130}, {100, 1, 130}, rng);
  const PrefillOptions o = opts(true);
  RaggedPrefill rp(cpu_config_for(p, DType::kBF16, 4, 400, 400));
  rp.plan(p.qo_indptr.data(), p.kv_indptr.data(), p.batch(), o);
  std::vector<uint8_t> previous;
  for (int layer = 0; layer < 3; ++layer) {
    refill(p, rng);
    const BackendOut r = run_backend(rp, p);
    check_vs_reference(p, o, r, tolerance(DType::kBF16));
    EXPECT_NE(r.out.bytes(), previous);  // new data really gave a new result
    previous = r.out.bytes();
  }
}

TEST(CpuBackendPlan, ReplanWithNewLengths) {
  std::mt19937_64 rng(202);
  const PrefillOptions o = opts(true, 50);
  AttnProblem first = make_problem(DType::kFP16, 4, 2, 128, 128, {65, 0, 9}, {65, 12, 200}, rng);
  RaggedPrefill rp(cpu_config_for(first, DType::kFP16, 6, 400, 500));
  rp.plan(first.qo_indptr.data(), first.kv_indptr.data(), first.batch(), o);
  check_vs_reference(first, o, run_backend(rp, first), tolerance(DType::kFP16));
  // Different batch size, lengths and options on the same object.
  const AttnProblem second =
      make_problem(DType::kFP16, 4, 2, 128, 128, {1, 200, 33, 0, 64, 7}, {5, 210, 33, 3, 64, 0}, rng);
  const PrefillOptions o2 = opts(false);
  rp.plan(second.qo_indptr.data(), second.kv_indptr.data(), second.batch(), o2);
  EXPECT_EQ(rp.info().total_q, second.total_q());
  check_vs_reference(second, o2, run_backend(rp, second), tolerance(DType::kFP16));
  // And back to the first batch.
  rp.plan(first.qo_indptr.data(), first.kv_indptr.data(), first.batch(), o);
  check_vs_reference(first, o, run_backend(rp, first), tolerance(DType::kFP16));
}

TEST(CpuBackendPlan, StridedViewsAndNoLse) {
  // q, k, v as slices of wider per-token buffers (token stride > H * D), lse omitted.
  std::mt19937_64 rng(303);
  const AttnProblem p = make_problem(DType::kBF16, 2, 1, 64, 64, {40, 77}, {90, 77}, rng);
  const int64_t pad = 24;
  auto widen = [&](const HostTensor& src, int64_t heads, int64_t dim) {
    HostTensor wide(src.dtype(), {src.shape()[0], heads * dim + pad});
    wide.fill_bytes(0xFF);  // NaN outside the slice: reading it would poison the result
    for (int64_t t = 0; t < src.shape()[0]; ++t)
      for (int64_t i = 0; i < heads * dim; ++i)
        wide.set(t * (heads * dim + pad) + i, src.get(t * heads * dim + i));
    return wide;
  };
  const HostTensor qw = widen(p.q, 2, 64), kw = widen(p.k, 1, 64), vw = widen(p.v, 1, 64);
  auto view = [&](const HostTensor& w, int64_t heads, int64_t dim) {
    return TensorView(const_cast<void*>(w.data()), w.dtype(), {w.shape()[0], heads, dim},
                      {heads * dim + pad, dim, 1});
  };
  const PrefillOptions o = opts(true);
  RaggedPrefill rp(cpu_config_for(p, DType::kBF16, 2, p.total_q(), p.total_kv()));
  rp.plan(p.qo_indptr.data(), p.kv_indptr.data(), p.batch(), o);
  HostTensor out(DType::kBF16, {p.total_q(), 2, 64});
  out.fill_bytes(0xFF);
  rp.run(view(qw, 2, 64), view(kw, 1, 64), view(vw, 1, 64), out.view(), nullptr);
  const RefResult ref = reference_result(p, o);
  EXPECT_LE(relative_error(out.to_doubles(), ref.out.to_doubles()), tolerance(DType::kBF16));
  // Same bits as the contiguous run.
  const BackendOut contiguous = run_backend(rp, p);
  EXPECT_EQ(out.bytes(), contiguous.out.bytes());
}

TEST(CpuBackendPlan, OddHeadDims) {
  // Dims that are not multiples of the micro-kernel block take the remainder paths.
  std::mt19937_64 rng(505);
  for (DType t : {DType::kBF16, DType::kFP16}) {
    const AttnProblem p = make_problem(t, 3, 1, 19, 13, {5, 70}, {80, 70}, rng);
    RaggedPrefill rp(cpu_config_for(p, t, 2, p.total_q(), p.total_kv()));
    rp.plan(p.qo_indptr.data(), p.kv_indptr.data(), p.batch(), opts(true, 33));
    check_vs_reference(p, opts(true, 33), run_backend(rp, p), tolerance(t));
  }
}

TEST(CpuBackendPlan, OneShotConvenience) {
  std::mt19937_64 rng(404);
  const AttnProblem p = make_problem(DType::kBF16, 4, 1, 192, 128, {3, 66}, {300, 66}, rng);
  const PrefillOptions o = opts(true);
  HostTensor out(DType::kBF16, {p.total_q(), 4, 128}), lse(DType::kFP32, {p.total_q(), 4});
  out.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  TensorView lv = lse.view();
  ragged_prefill(p.q.view(), p.k.view(), p.v.view(), p.qo_indptr.data(), p.kv_indptr.data(),
                 p.batch(), o, out.view(), &lv);
  check_vs_reference(p, o, BackendOut{out, lse}, tolerance(DType::kBF16));
}

}  // namespace
}  // namespace test
}  // namespace mlakit
