// merge_states: attention over two disjoint key sets, merged, equals attention over all keys;
// -inf handling is exact; in-place merge; the CPU merge agrees with reference::merge_states.
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

constexpr double kInf = std::numeric_limits<double>::infinity();

// The same q, with only kv rows [lo[b], hi[b]) of each sequence b.
AttnProblem sub_kv(const AttnProblem& p, const std::vector<int32_t>& lo,
                   const std::vector<int32_t>& hi) {
  AttnProblem s;
  s.heads = p.heads;
  s.kv_heads = p.kv_heads;
  s.dqk = p.dqk;
  s.dvo = p.dvo;
  s.qo_indptr = p.qo_indptr;
  std::vector<int32_t> lens;
  for (size_t b = 0; b < lo.size(); ++b) lens.push_back(hi[b] - lo[b]);
  s.kv_indptr = make_indptr(lens);
  s.q = p.q;
  s.k = HostTensor(p.k.dtype(), {s.total_kv(), p.kv_heads, p.dqk});
  s.v = HostTensor(p.v.dtype(), {s.total_kv(), p.kv_heads, p.dvo});
  const int64_t kr = p.kv_heads * p.dqk, vr = p.kv_heads * p.dvo;
  for (size_t b = 0; b < lo.size(); ++b) {
    for (int32_t j = lo[b]; j < hi[b]; ++j) {
      const int64_t src = p.kv_indptr[b] + j, dst = s.kv_indptr[b] + (j - lo[b]);
      for (int64_t i = 0; i < kr; ++i) s.k.set(dst * kr + i, p.k.get(src * kr + i));
      for (int64_t i = 0; i < vr; ++i) s.v.set(dst * vr + i, p.v.get(src * vr + i));
    }
  }
  return s;
}

struct Partial {
  HostTensor out, lse;  // out in `dtype`, lse fp32
};

// Attention of p in `dtype`: the CPU backend for bf16/fp16, the reference (fp32 out) for fp32.
Partial attend(const AttnProblem& p, const PrefillOptions& o, DType dtype) {
  Partial r{HostTensor(dtype, {p.total_q(), p.heads, p.dvo}),
            HostTensor(DType::kFP32, {p.total_q(), p.heads})};
  r.out.fill_bytes(0xFF);
  r.lse.fill_bytes(0xFF);
  TensorView lse = r.lse.view();
  if (dtype == DType::kFP32) {
    reference::ragged_prefill(p.q.view(), p.k.view(), p.v.view(), p.qo_indptr.data(),
                              p.kv_indptr.data(), p.batch(), o, r.out.view(), &lse);
  } else {
    ragged_prefill(p.q.view(), p.k.view(), p.v.view(), p.qo_indptr.data(), p.kv_indptr.data(),
                   p.batch(), o, r.out.view(), &lse);
  }
  return r;
}

double merge_tolerance(DType t) { return t == DType::kBF16 ? 1e-2 : t == DType::kFP16 ? 2e-3 : 1e-6; }

void expect_lse_close(const HostTensor& got, const HostTensor& want, double tol) {
  std::vector<double> g, w;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (std::isinf(want.get(i))) {
      EXPECT_EQ(got.get(i), -kInf) << "lse " << i;
    } else {
      g.push_back(got.get(i));
      w.push_back(want.get(i));
    }
  }
  EXPECT_LE(relative_error(g, w), tol);
}

// Merges a and b with the CPU merge and the reference merge, checks both against `full`.
void merge_and_check(const Partial& a, const Partial& b, const RefResult& full, DType dtype) {
  HostTensor out(dtype, a.out.shape()), lse(DType::kFP32, a.lse.shape());
  out.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  TensorView lv = lse.view();
  merge_states(a.out.view(), a.lse.view(), b.out.view(), b.lse.view(), out.view(), &lv);
  EXPECT_LE(relative_error(out.to_doubles(), full.out.to_doubles()), merge_tolerance(dtype));
  expect_lse_close(lse, full.lse, 1e-5);

  HostTensor rout(DType::kFP64, a.out.shape()), rlse(DType::kFP64, a.lse.shape());
  TensorView rlv = rlse.view();
  reference::merge_states(a.out.view(), a.lse.view(), b.out.view(), b.lse.view(), rout.view(), &rlv);
  // The CPU merge differs from the float64 merge of the same inputs by output rounding only.
  const double round_tol = dtype == DType::kBF16 ? 8e-3 : dtype == DType::kFP16 ? 1e-3 : 1e-6;
  EXPECT_LE(relative_error(out.to_doubles(), rout.to_doubles()), round_tol);
  expect_lse_close(lse, rlse, 1e-6);
}

class MergeSplit : public ::testing::TestWithParam<DType> {};

TEST_P(MergeSplit, NonCausalRandomSplit) {
  const DType dtype = GetParam();
  std::mt19937_64 rng(500 + static_cast<int>(dtype));
  const std::vector<int32_t> ql = {1, 40, 65, 7}, kl = {9, 150, 65, 1};
  const AttnProblem p = make_problem(dtype, 4, 2, 192, 128, ql, kl, rng);
  // Split points anywhere, including 0 and lk (one side empty -> lse -inf there).
  std::vector<int32_t> zero(ql.size(), 0), split(ql.size()), end(kl);
  for (size_t b = 0; b < kl.size(); ++b)
    split[b] = std::uniform_int_distribution<int32_t>(0, kl[b])(rng);
  split[3] = 0;
  split[0] = kl[0];
  const PrefillOptions o;  // non-causal
  const RefResult full = reference_result(p, o);
  merge_and_check(attend(sub_kv(p, zero, split), o, dtype), attend(sub_kv(p, split, end), o, dtype),
                  full, dtype);
}

TEST_P(MergeSplit, CausalPrefixContextPlusNewTokens) {
  // lk = prefix + lq: every new token sees the whole prefix (non-causal part) plus the new
  // tokens up to itself (causal part with lq == lk).
  const DType dtype = GetParam();
  std::mt19937_64 rng(600 + static_cast<int>(dtype));
  const std::vector<int32_t> ql = {33, 1, 70, 5}, prefix = {100, 0, 64, 3};
  std::vector<int32_t> kl, zero(ql.size(), 0), end;
  for (size_t b = 0; b < ql.size(); ++b) kl.push_back(prefix[b] + ql[b]);
  end = kl;
  const AttnProblem p = make_problem(dtype, 4, 1, 128, 128, ql, kl, rng);
  PrefillOptions causal;
  causal.causal = true;
  const RefResult full = reference_result(p, causal);
  const Partial ctx = attend(sub_kv(p, zero, prefix), PrefillOptions{}, dtype);
  const Partial fresh = attend(sub_kv(p, prefix, end), causal, dtype);
  merge_and_check(ctx, fresh, full, dtype);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MergeSplit,
                         ::testing::Values(DType::kBF16, DType::kFP16, DType::kFP32),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

// Random partial states with some lse entries -inf on one side or both.
struct States {
  HostTensor oa, la, ob, lb;
};
States random_states(DType dtype, int64_t n, int64_t h, int64_t d, std::mt19937_64& rng) {
  States s{HostTensor(dtype, {n, h, d}), HostTensor(DType::kFP32, {n, h}),
           HostTensor(dtype, {n, h, d}), HostTensor(DType::kFP32, {n, h})};
  s.oa.fill_normal(rng);
  s.ob.fill_normal(rng);
  s.la.fill_normal(rng, 3.0);
  s.lb.fill_normal(rng, 3.0);
  for (int64_t i = 0; i < n * h; ++i) {
    switch (i % 4) {
      // The empty side's values must be ignored, not multiplied by 0: make them inf.
      case 1:
        s.la.set(i, -kInf);
        for (int64_t j = 0; j < d; ++j) s.oa.set(i * d + j, kInf);
        break;
      case 2:
        s.lb.set(i, -kInf);
        for (int64_t j = 0; j < d; ++j) s.ob.set(i * d + j, kInf);
        break;
      case 3: s.la.set(i, -kInf); s.lb.set(i, -kInf); break;
      default: break;
    }
  }
  return s;
}

class MergeExact : public ::testing::TestWithParam<DType> {};

TEST_P(MergeExact, MinusInfinityCases) {
  const DType dtype = GetParam();
  std::mt19937_64 rng(700 + static_cast<int>(dtype));
  const int64_t n = 37, h = 3, d = 128;
  const States s = random_states(dtype, n, h, d, rng);
  HostTensor out(dtype, {n, h, d}), lse(DType::kFP32, {n, h});
  out.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  TensorView lv = lse.view();
  merge_states(s.oa.view(), s.la.view(), s.ob.view(), s.lb.view(), out.view(), &lv);
  const size_t es = dtype_size(dtype), row = static_cast<size_t>(d) * es;
  const auto* po = static_cast<const uint8_t*>(out.data());
  const auto* pa = static_cast<const uint8_t*>(s.oa.data());
  const auto* pb = static_cast<const uint8_t*>(s.ob.data());
  for (int64_t i = 0; i < n * h; ++i) {
    const bool a_empty = std::isinf(s.la.get(i)), b_empty = std::isinf(s.lb.get(i));
    if (a_empty && b_empty) {
      EXPECT_EQ(lse.get(i), -kInf);
      for (int64_t j = 0; j < d; ++j) EXPECT_EQ(out.get(i * d + j), 0.0);
    } else if (a_empty) {
      EXPECT_EQ(std::memcmp(po + i * row, pb + i * row, row), 0) << "row " << i;
      EXPECT_EQ(lse.get(i), s.lb.get(i));
    } else if (b_empty) {
      EXPECT_EQ(std::memcmp(po + i * row, pa + i * row, row), 0) << "row " << i;
      EXPECT_EQ(lse.get(i), s.la.get(i));
    } else {
      const double la = s.la.get(i), lb = s.lb.get(i);
      const double m = std::max(la, lb);
      const double l = m + std::log(std::exp(la - m) + std::exp(lb - m));
      EXPECT_NEAR(lse.get(i), l, 1e-5 * std::max(1.0, std::fabs(l)));
      for (int64_t j = 0; j < d; ++j) {
        const double want = s.oa.get(i * d + j) * std::exp(la - l) + s.ob.get(i * d + j) * std::exp(lb - l);
        EXPECT_NEAR(out.get(i * d + j), want, 1e-2 * std::fabs(want) + 1e-3);
      }
    }
  }
  // The reference merge follows the same -inf rules.
  HostTensor rout(dtype, {n, h, d}), rlse(DType::kFP32, {n, h});
  TensorView rlv = rlse.view();
  reference::merge_states(s.oa.view(), s.la.view(), s.ob.view(), s.lb.view(), rout.view(), &rlv);
  for (int64_t i = 0; i < n * h; ++i) {
    if (std::isinf(s.la.get(i)) || std::isinf(s.lb.get(i))) {
      EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(rout.data()) + i * row, po + i * row, row), 0)
          << "row " << i;
      EXPECT_EQ(rlse.get(i), lse.get(i));
    }
  }
  EXPECT_LE(relative_error(out, rout), dtype == DType::kFP32 ? 1e-6 : 8e-3);
}

TEST_P(MergeExact, InPlace) {
  const DType dtype = GetParam();
  std::mt19937_64 rng(800 + static_cast<int>(dtype));
  const States s = random_states(dtype, 50, 4, 64, rng);
  HostTensor out(dtype, {50, 4, 64}), lse(DType::kFP32, {50, 4});
  TensorView lv = lse.view();
  merge_states(s.oa.view(), s.la.view(), s.ob.view(), s.lb.view(), out.view(), &lv);
  // out aliases out_a and lse_out aliases lse_a.
  HostTensor a = s.oa, la = s.la;
  TensorView lav = la.view();
  merge_states(a.view(), la.view(), s.ob.view(), s.lb.view(), a.view(), &lav);
  EXPECT_EQ(a.bytes(), out.bytes());
  EXPECT_EQ(la.bytes(), lse.bytes());
  // out aliases out_b, no lse output.
  HostTensor b = s.ob;
  merge_states(s.oa.view(), s.la.view(), b.view(), s.lb.view(), b.view(), nullptr);
  EXPECT_EQ(b.bytes(), out.bytes());
}

// FlashAttention-2 writes lse = +inf for a row with no key (vLLM's merge treats it as empty):
// +inf merges exactly like -inf, in the backend and in the reference.
TEST_P(MergeExact, PlusInfinityMeansEmptyToo) {
  const DType dtype = GetParam();
  std::mt19937_64 rng(900 + static_cast<int>(dtype));
  const int64_t n = 29, h = 3, d = 64;
  const States s = random_states(dtype, n, h, d, rng);
  States p = s;
  for (int64_t i = 0; i < n * h; ++i) {
    if (std::isinf(p.la.get(i))) p.la.set(i, kInf);
    if (std::isinf(p.lb.get(i)) && i % 2 == 0) p.lb.set(i, kInf);  // mixed +inf / -inf
  }
  HostTensor out(dtype, {n, h, d}), lse(DType::kFP32, {n, h}), out_p(dtype, {n, h, d}), lse_p(DType::kFP32, {n, h});
  TensorView lv = lse.view(), lpv = lse_p.view();
  merge_states(s.oa.view(), s.la.view(), s.ob.view(), s.lb.view(), out.view(), &lv);
  merge_states(p.oa.view(), p.la.view(), p.ob.view(), p.lb.view(), out_p.view(), &lpv);
  EXPECT_EQ(out.bytes(), out_p.bytes());
  EXPECT_EQ(lse.bytes(), lse_p.bytes());
  HostTensor rout(DType::kFP64, {n, h, d}), rout_p(DType::kFP64, {n, h, d});
  reference::merge_states(s.oa.view(), s.la.view(), s.ob.view(), s.lb.view(), rout.view(), nullptr);
  reference::merge_states(p.oa.view(), p.la.view(), p.ob.view(), p.lb.view(), rout_p.view(), nullptr);
  EXPECT_EQ(rout.bytes(), rout_p.bytes());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MergeExact,
                         ::testing::Values(DType::kBF16, DType::kFP16, DType::kFP32),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

}  // namespace
}  // namespace test
}  // namespace mlakit
