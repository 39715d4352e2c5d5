// reference::ragged_prefill against an independent naive softmax written here in long double.
// The naive version scores every (i, j) pair and applies the mask predicate directly, instead
// of computing a visible range, so a mistake in either mask derivation shows up.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "attention_cases.h"

namespace mlakit {
namespace test {
namespace {

struct Naive {
  std::vector<long double> out;  // [total_q, H, Dvo]
  std::vector<long double> lse;  // [total_q, H]
};

Naive naive_attention(const AttnProblem& p, const PrefillOptions& o) {
  Naive r;
  r.out.assign(static_cast<size_t>(p.total_q() * p.heads * p.dvo), 0.0L);
  r.lse.assign(static_cast<size_t>(p.total_q() * p.heads), 0.0L);
  const long double scale =
      o.sm_scale != 0.0f ? static_cast<long double>(o.sm_scale) : 1.0L / std::sqrt((long double)p.dqk);
  const long double cap = o.logits_soft_cap;
  const int group = p.heads / p.kv_heads;
  for (int b = 0; b < p.batch(); ++b) {
    const int64_t q0 = p.qo_indptr[b], k0 = p.kv_indptr[b];
    const int64_t lq = p.qo_indptr[b + 1] - q0, lk = p.kv_indptr[b + 1] - k0;
    for (int64_t i = 0; i < lq; ++i) {
      for (int h = 0; h < p.heads; ++h) {
        const int hk = h / group;
        std::vector<long double> s(static_cast<size_t>(lk));
        std::vector<bool> vis(static_cast<size_t>(lk));
        long double mx = -std::numeric_limits<long double>::infinity();
        for (int64_t j = 0; j < lk; ++j) {
          bool ok = true;
          if (o.causal && !(j <= lk - lq + i)) ok = false;
          if (o.window_left >= 0 && !(j >= lk - lq + i - o.window_left)) ok = false;
          vis[j] = ok;
          if (!ok) continue;
          long double dot = 0;
          for (int d = 0; d < p.dqk; ++d)
            dot += (long double)p.q.get(((q0 + i) * p.heads + h) * p.dqk + d) *
                   (long double)p.k.get(((k0 + j) * p.kv_heads + hk) * p.dqk + d);
          long double x = dot * scale;
          if (cap > 0) x = cap * std::tanh(x / cap);
          s[j] = x;
          mx = std::max(mx, x);
        }
        const size_t orow = static_cast<size_t>(((q0 + i) * p.heads + h) * p.dvo);
        const size_t lrow = static_cast<size_t>((q0 + i) * p.heads + h);
        if (mx == -std::numeric_limits<long double>::infinity()) {
          r.lse[lrow] = mx;
          continue;
        }
        long double sum = 0;
        for (int64_t j = 0; j < lk; ++j) {
          if (!vis[j]) continue;
          const long double w = std::exp(s[j] - mx);
          sum += w;
          for (int d = 0; d < p.dvo; ++d)
            r.out[orow + d] += w * (long double)p.v.get(((k0 + j) * p.kv_heads + hk) * p.dvo + d);
        }
        for (int d = 0; d < p.dvo; ++d) r.out[orow + d] /= sum;
        r.lse[lrow] = mx + std::log(sum);
      }
    }
  }
  return r;
}

struct RefCase {
  const char* name;
  int heads, kv_heads, dqk, dvo;
  PrefillOptions options;
  DType out_dtype;
};

// Compares the reference with the naive result: output relative error, lse per element, and
// rows with no visible key exactly 0 / -inf. Returns the number of empty rows seen.
int64_t check_against_naive(const AttnProblem& p, const PrefillOptions& o, DType out_dtype,
                            double tol) {
  HostTensor out(out_dtype, {p.total_q(), p.heads, p.dvo});
  HostTensor lse(out_dtype, {p.total_q(), p.heads});
  out.fill_bytes(0xFF);  // NaN in every float format: unwritten entries are caught
  lse.fill_bytes(0xFF);
  TensorView lv = lse.view();
  reference::ragged_prefill(p.q.view(), p.k.view(), p.v.view(), p.qo_indptr.data(),
                            p.kv_indptr.data(), p.batch(), o, out.view(), &lv);
  const Naive n = naive_attention(p, o);
  std::vector<double> want(n.out.begin(), n.out.end());
  EXPECT_LE(relative_error(out.to_doubles(), want), tol);
  int64_t empty_rows = 0;
  for (int64_t r = 0; r < p.total_q() * p.heads; ++r) {
    const long double w = n.lse[r];
    const double got = lse.get(r);
    if (std::isinf(w)) {
      ++empty_rows;
      EXPECT_EQ(got, -std::numeric_limits<double>::infinity()) << "row " << r;
      for (int d = 0; d < p.dvo; ++d) {
        const double x = out.get(r * p.dvo + d);
        EXPECT_TRUE(x == 0.0 && !std::signbit(x)) << "row " << r << " d " << d << " = " << x;
      }
    } else {
      EXPECT_NEAR(got, (double)w, tol * std::max(1.0, std::fabs((double)w))) << "row " << r;
    }
  }
  return empty_rows;
}

class ReferenceVsNaive : public ::testing::TestWithParam<RefCase> {};

TEST_P(ReferenceVsNaive, RandomRaggedBatches) {
  const RefCase& c = GetParam();
  std::mt19937_64 rng(0x5eed0000u + c.dqk * 7 + c.heads * 131 + c.options.window_left * 3 +
                      (c.options.causal ? 1 : 0));
  // Lengths include 0, 1, odd and > 128; kv lengths mix shorter and longer than q.
  const std::vector<int32_t> choices = {0, 1, 2, 7, 33, 64, 65, 129, 150};
  for (int trial = 0; trial < 2; ++trial) {
    std::vector<int32_t> ql = make_random_lengths(4, rng, choices);
    ql[trial] = 1 + trial * 140;  // make sure a 1-row and a > 128-row sequence appear
    const std::vector<int32_t> kl = paired_kv_lengths(ql, rng, {-40, -1, 0, 0, 5, 60});
    const AttnProblem p = make_problem(DType::kFP64, c.heads, c.kv_heads, c.dqk, c.dvo, ql, kl, rng);
    check_against_naive(p, c.options, c.out_dtype, c.out_dtype == DType::kFP64 ? 1e-12 : 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ReferenceVsNaive,
    ::testing::Values(RefCase{"mla_noncausal", 2, 2, 192, 128, opts(false), DType::kFP64},
                      RefCase{"mla_causal_gqa", 4, 1, 192, 128, opts(true), DType::kFP64},
                      RefCase{"d128_causal_window", 2, 1, 128, 128, opts(true, 20), DType::kFP64},
                      RefCase{"d64_window_noncausal", 2, 2, 64, 64, opts(false, 9), DType::kFP64},
                      RefCase{"d64_softcap_scale", 4, 1, 64, 64, opts(true, -1, 2.5f, 0.3f),
                              DType::kFP64},
                      RefCase{"mla_softcap_fp32_out", 2, 1, 192, 128, opts(true, 40, 10.0f),
                              DType::kFP32}),
    [](const ::testing::TestParamInfo<RefCase>& i) { return std::string(i.param.name); });

TEST(Reference, EmptyRowsAreZeroAndMinusInf) {
  std::mt19937_64 rng(7);
  // q longer than kv under causal: the first lq - lk rows see nothing; lk = 0 sees nothing.
  const AttnProblem p = make_problem(DType::kFP64, 2, 1, 64, 64, {10, 3, 5}, {4, 0, 5}, rng);
  EXPECT_EQ(check_against_naive(p, opts(true), DType::kFP64, 1e-12), (6 + 3) * 2);
  // A window of 0 under causal sees exactly the diagonal key: no empty rows beyond those.
  EXPECT_EQ(check_against_naive(p, opts(true, 0), DType::kFP64, 1e-12), (6 + 3) * 2);
}

TEST(Reference, HalfInputsMatchNaiveOnTheSameRoundedValues) {
  std::mt19937_64 rng(11);
  for (DType t : {DType::kBF16, DType::kFP16}) {
    const AttnProblem p = make_problem(t, 4, 2, 128, 128, {17, 130}, {40, 130}, rng);
    check_against_naive(p, opts(true), DType::kFP64, 1e-12);
  }
}

// Every row, one at a time, against the whole batch (which spreads rows over threads in chunks:
// empty sequences and sequence ends inside and across chunks), bit for bit.
TEST(Reference, AttentionRowMatchesRaggedPrefill) {
  std::mt19937_64 rng(13);
  const AttnProblem p = make_problem(DType::kFP32, 4, 2, 192, 128, {5, 0, 70, 0, 0, 33, 1}, {9, 3, 70, 4, 0, 40, 1}, rng);
  const PrefillOptions o = opts(true, 30);
  const RefResult full = reference_result(p, o);
  std::vector<double> row(p.dvo);
  for (int64_t r = 0; r < p.total_q(); ++r) {
    for (int h = 0; h < p.heads; ++h) {
      double l = 0;
      reference::attention_row(p.q.view(), p.k.view(), p.v.view(), p.qo_indptr.data(),
                               p.kv_indptr.data(), p.batch(), o, r, h, row.data(), &l);
      for (int d = 0; d < p.dvo; ++d) EXPECT_EQ(row[d], full.out.get((r * p.heads + h) * p.dvo + d));
      EXPECT_EQ(l, full.lse.get(r * p.heads + h));
    }
  }
  EXPECT_TRUE(throws_error(
      [&] {
        reference::attention_row(p.q.view(), p.k.view(), p.v.view(), p.qo_indptr.data(),
                                 p.kv_indptr.data(), p.batch(), o, p.total_q(), 0, row.data(), nullptr);
      },
      ErrorKind::kInvalidArgument, "q_row"));
  EXPECT_TRUE(throws_error(
      [&] {
        reference::attention_row(p.q.view(), p.k.view(), p.v.view(), p.qo_indptr.data(),
                                 p.kv_indptr.data(), p.batch(), o, 0, p.heads, row.data(), nullptr);
      },
      ErrorKind::kInvalidArgument, "head"));
}

TEST(Reference, DefaultScaleIsInverseSqrtHeadDim) {
  std::mt19937_64 rng(17);
  const AttnProblem p = make_problem(DType::kFP64, 2, 2, 64, 64, {20}, {33}, rng);
  const RefResult a = reference_result(p, opts(false));
  const RefResult b = reference_result(p, opts(false, -1, 0.0f, 1.0f / 8.0f));  // 1/sqrt(64) exact
  EXPECT_EQ(a.out.bytes(), b.out.bytes());
  const RefResult c = reference_result(p, opts(false, -1, 0.0f, 0.5f));
  EXPECT_GT(relative_error(c.out, a.out), 1e-3);  // the scale really changes the result
}

TEST(Reference, RejectsBadArguments) {
  std::mt19937_64 rng(19);
  const AttnProblem p = make_problem(DType::kFP64, 2, 2, 64, 64, {4}, {4}, rng);
  HostTensor bf16_out(DType::kBF16, {4, 2, 64});
  EXPECT_TRUE(throws_error(
      [&] {
        reference::ragged_prefill(p.q.view(), p.k.view(), p.v.view(), p.qo_indptr.data(),
                                  p.kv_indptr.data(), 1, {}, bf16_out.view());
      },
      ErrorKind::kTypeMismatch, "out"));
  const std::vector<int32_t> bad = {0, 5};
  HostTensor out(DType::kFP64, {4, 2, 64});
  EXPECT_ANY_THROW(reference::ragged_prefill(p.q.view(), p.k.view(), p.v.view(), bad.data(),
                                             p.kv_indptr.data(), 1, {}, out.view()));
}

}  // namespace
}  // namespace test
}  // namespace mlakit
