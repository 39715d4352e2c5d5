// What an engine passes that a tight, freshly allocated batch does not: capacity-sized buffers
// (more rows than the plan's tokens, as CUDA graphs are captured over) and LSE in either
// [T, H] or [H, T] memory. CPU backend, one-shot entry point and reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mlakit/mlakit.h"
#include "util/test_util.h"

namespace mlakit {
namespace {

using test::HostTensor;

constexpr int H = 4, HKV = 2, DQK = 32, DVO = 16;
constexpr int64_t kCapQ = 160, kCapKV = 200;
constexpr uint8_t kPoison = 0xA5;

PrefillConfig config() {
  PrefillConfig c;
  c.num_qo_heads = H;
  c.num_kv_heads = HKV;
  c.head_dim_qk = DQK;
  c.head_dim_vo = DVO;
  c.dtype = DType::kBF16;
  c.max_batch = 8;
  c.max_q_tokens = kCapQ;
  c.max_kv_tokens = kCapKV;
  return c;
}

TensorView rows(TensorView v, int64_t n) {
  v.shape[0] = n;
  return v;
}

// Rows [from, end) of every element NaN: a result that read any of them would be NaN.
void nan_rows(HostTensor& t, int64_t from) {
  const int64_t per_row = t.numel() / t.shape()[0];
  for (int64_t i = from * per_row; i < t.numel(); ++i) t.set(i, std::nan(""));
}

bool bytes_equal(const HostTensor& a, int64_t a_rows, const HostTensor& b) {
  const size_t n = static_cast<size_t>(a_rows) * (a.nbytes() / a.shape()[0]);
  return n <= b.nbytes() && std::memcmp(a.data(), b.data(), n) == 0;
}

bool all_poison_from_row(const HostTensor& t, int64_t from) {
  const size_t row_bytes = t.nbytes() / t.shape()[0];
  for (size_t i = static_cast<size_t>(from) * row_bytes; i < t.nbytes(); ++i)
    if (t.bytes()[i] != kPoison) return false;
  return true;
}

struct Capacity {
  HostTensor q{DType::kBF16, {kCapQ, H, DQK}}, k{DType::kBF16, {kCapKV, HKV, DQK}},
      v{DType::kBF16, {kCapKV, HKV, DVO}};
  HostTensor out{DType::kBF16, {kCapQ, H, DVO}}, lse{DType::kFP32, {kCapQ, H}};
};

// The same batch in tensors of exactly total_q / total_kv rows.
struct Tight {
  HostTensor q, k, v, out, lse;
  Tight(const Capacity& c, int64_t tq, int64_t tk)
      : q(DType::kBF16, {tq, H, DQK}), k(DType::kBF16, {tk, HKV, DQK}), v(DType::kBF16, {tk, HKV, DVO}),
        out(DType::kBF16, {tq, H, DVO}), lse(DType::kFP32, {tq, H}) {
    std::memcpy(q.data(), c.q.data(), q.nbytes());
    std::memcpy(k.data(), c.k.data(), k.nbytes());
    std::memcpy(v.data(), c.v.data(), v.nbytes());
  }
};

TEST(CapacityBuffers, OnlyThePlannedRowsAreReadOrWritten) {
  std::mt19937_64 rng(17);
  Capacity cap;
  RaggedPrefill p(config());
  const std::vector<std::vector<int32_t>> q_sets = {{40, 1, 0, 77}, {150}, {3, 9}};
  const std::vector<std::vector<int32_t>> kv_sets = {{60, 30, 5, 77}, {200}, {3, 100}};
  for (size_t s = 0; s < q_sets.size(); ++s) {
    SCOPED_TRACE("batch " + std::to_string(s));
    const std::vector<int32_t> qo = test::make_indptr(q_sets[s]), kv = test::make_indptr(kv_sets[s]);
    const int batch = static_cast<int>(q_sets[s].size());
    const int64_t tq = qo.back(), tk = kv.back();
    for (HostTensor* t : {&cap.q, &cap.k, &cap.v}) t->fill_normal(rng);
    Tight tight(cap, tq, tk);
    nan_rows(cap.q, tq);
    nan_rows(cap.k, tk);
    nan_rows(cap.v, tk);
    const PrefillOptions opt = s == 1 ? PrefillOptions{} : PrefillOptions{true, 0.0f, -1, 0.0f};

    // Tight tensors, for comparison: the CPU backend is deterministic for a given plan.
    TensorView tl = tight.lse.view();
    p.plan(qo.data(), kv.data(), batch, opt);
    p.run(tight.q.view(), tight.k.view(), tight.v.view(), tight.out.view(), &tl);

    // RaggedPrefill::run on the whole capacity-sized buffers.
    cap.out.fill_bytes(kPoison);
    cap.lse.fill_bytes(kPoison);
    TensorView cl = cap.lse.view();
    p.run(cap.q.view(), cap.k.view(), cap.v.view(), cap.out.view(), &cl);
    EXPECT_TRUE(bytes_equal(tight.out, tq, cap.out)) << "run: out rows differ from the tight run";
    EXPECT_TRUE(bytes_equal(tight.lse, tq, cap.lse)) << "run: lse rows differ from the tight run";
    EXPECT_TRUE(all_poison_from_row(cap.out, tq)) << "run wrote out rows past total_q";
    EXPECT_TRUE(all_poison_from_row(cap.lse, tq)) << "run wrote lse rows past total_q";

    // The one-shot entry point and the reference take the same buffers.
    cap.out.fill_bytes(kPoison);
    cap.lse.fill_bytes(kPoison);
    ragged_prefill(cap.q.view(), cap.k.view(), cap.v.view(), qo.data(), kv.data(), batch, opt,
                   cap.out.view(), &cl);
    EXPECT_TRUE(bytes_equal(tight.out, tq, cap.out)) << "ragged_prefill: out rows differ";
    EXPECT_TRUE(all_poison_from_row(cap.out, tq)) << "ragged_prefill wrote past total_q";

    HostTensor ref_tight(DType::kFP64, {tq, H, DVO}), ref_cap(DType::kFP64, {kCapQ, H, DVO});
    ref_cap.fill_bytes(kPoison);
    reference::ragged_prefill(tight.q.view(), tight.k.view(), tight.v.view(), qo.data(), kv.data(), batch,
                              opt, ref_tight.view(), nullptr);
    reference::ragged_prefill(cap.q.view(), cap.k.view(), cap.v.view(), qo.data(), kv.data(), batch, opt,
                              ref_cap.view(), nullptr);
    EXPECT_TRUE(bytes_equal(ref_tight, tq, ref_cap)) << "reference: rows differ";
    EXPECT_TRUE(all_poison_from_row(ref_cap, tq)) << "reference wrote past total_q";
    EXPECT_LT(test::relative_error(tight.out, ref_tight), 2e-2);
  }
}

TEST(CapacityBuffers, CapacityChecksStay) {
  Capacity cap;
  RaggedPrefill p(config());
  // More tokens than the config's capacity: plan() refuses, whatever the buffers hold.
  const std::vector<int32_t> qo = test::make_indptr({kCapQ + 1}), kv = test::make_indptr({10});
  EXPECT_TRUE(test::throws_error([&] { p.plan(qo.data(), kv.data(), 1); }, ErrorKind::kInvalidArgument,
                                 "qo_indptr"));
  // Buffers with fewer rows than the plan's tokens are refused by run(), naming the tensor.
  const std::vector<int32_t> qo2 = test::make_indptr({100}), kv2 = test::make_indptr({120});
  p.plan(qo2.data(), kv2.data(), 1);
  cap.out.fill_bytes(kPoison);
  EXPECT_TRUE(test::throws_error([&] { p.run(rows(cap.q.view(), 99), cap.k.view(), cap.v.view(), cap.out.view()); },
                                 ErrorKind::kInvalidArgument, "q"));
  EXPECT_TRUE(test::throws_error([&] { p.run(cap.q.view(), cap.k.view(), rows(cap.v.view(), 119), cap.out.view()); },
                                 ErrorKind::kInvalidArgument, "v"));
  EXPECT_TRUE(test::throws_error([&] { p.run(cap.q.view(), cap.k.view(), cap.v.view(), rows(cap.out.view(), 50)); },
                                 ErrorKind::kInvalidArgument, "out"));
  EXPECT_TRUE(all_poison_from_row(cap.out, 0));
}

// LSE as [H, T] memory (FlashAttention's and vLLM's layout): a [T, H] view with strides
// {1, T_capacity}. Same values as the [T, H] layout, bit for bit.
TEST(LseLayout, HeadMajorViewMatchesTokenMajor) {
  std::mt19937_64 rng(3);
  Capacity cap;
  for (HostTensor* t : {&cap.q, &cap.k, &cap.v}) t->fill_normal(rng);
  const std::vector<int32_t> qo = test::make_indptr({30, 0, 70, 2}), kv = test::make_indptr({30, 4, 100, 0});
  const int64_t tq = qo.back();
  RaggedPrefill p(config());
  p.plan(qo.data(), kv.data(), 4, PrefillOptions{true, 0.0f, -1, 0.0f});

  HostTensor lse_th(DType::kFP32, {kCapQ, H}), lse_ht(DType::kFP32, {H, kCapQ});
  lse_ht.fill_bytes(kPoison);
  TensorView th = lse_th.view();
  TensorView ht(lse_ht.data(), DType::kFP32, {kCapQ, H}, {1, kCapQ});
  p.run(cap.q.view(), cap.k.view(), cap.v.view(), cap.out.view(), &th);
  HostTensor out2(DType::kBF16, {kCapQ, H, DVO});
  p.run(cap.q.view(), cap.k.view(), cap.v.view(), out2.view(), &ht);
  int64_t written = 0;
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < kCapQ; ++t) {
      const float* got = static_cast<const float*>(lse_ht.data()) + h * kCapQ + t;
      if (t < tq) {
        const float want = static_cast<const float*>(lse_th.data())[t * H + h];
        ASSERT_EQ(std::memcmp(got, &want, 4), 0) << "h " << h << " t " << t;
        written += std::isfinite(want) ? 1 : 0;
      } else {
        uint32_t bits;
        std::memcpy(&bits, got, 4);
        ASSERT_EQ(bits, 0xA5A5A5A5u) << "written past total_q: h " << h << " t " << t;
      }
    }
  }
  EXPECT_GT(written, 0);
  EXPECT_EQ(std::memcmp(out2.data(), cap.out.data(), static_cast<size_t>(tq) * H * DVO * 2), 0);

  // The reference takes the same view.
  HostTensor ref(DType::kFP64, {kCapQ, H, DVO}), ref_ht(DType::kFP64, {H, kCapQ}), ref_th(DType::kFP64, {kCapQ, H});
  TensorView rht(ref_ht.data(), DType::kFP64, {kCapQ, H}, {1, kCapQ}), rth = ref_th.view();
  reference::ragged_prefill(cap.q.view(), cap.k.view(), cap.v.view(), qo.data(), kv.data(), 4,
                            PrefillOptions{true, 0.0f, -1, 0.0f}, ref.view(), &rht);
  reference::ragged_prefill(cap.q.view(), cap.k.view(), cap.v.view(), qo.data(), kv.data(), 4,
                            PrefillOptions{true, 0.0f, -1, 0.0f}, ref.view(), &rth);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < tq; ++t) ASSERT_EQ(ref_ht.get(h * kCapQ + t), ref_th.get(t * H + h));
}

TEST(LseLayout, MergeStatesTakesHeadMajorLse) {
  std::mt19937_64 rng(8);
  const int64_t n = 37, h = 3, d = 16;
  HostTensor a(DType::kFP16, {n, h, d}), b(DType::kFP16, {n, h, d});
  HostTensor la(DType::kFP32, {n, h}), lb(DType::kFP32, {n, h});
  for (HostTensor* t : {&a, &b, &la, &lb}) t->fill_normal(rng);
  la.set(0, -INFINITY);
  // The same values in [H, N] memory.
  HostTensor la_t(DType::kFP32, {h, n}), lb_t(DType::kFP32, {h, n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < h; ++j) {
      la_t.set(j * n + i, la.get(i * h + j));
      lb_t.set(j * n + i, lb.get(i * h + j));
    }
  auto hm = [&](HostTensor& t) { return TensorView(t.data(), DType::kFP32, {n, h}, {1, n}); };

  HostTensor out(DType::kFP16, {n, h, d}), lo(DType::kFP32, {n, h});
  TensorView lov = lo.view();
  merge_states(a.view(), la.view(), b.view(), lb.view(), out.view(), &lov);
  HostTensor out2(DType::kFP16, {n, h, d}), lo_t(DType::kFP32, {h, n});
  TensorView lo_tv = hm(lo_t);
  merge_states(a.view(), hm(la_t), b.view(), hm(lb_t), out2.view(), &lo_tv);
  EXPECT_EQ(out.bytes(), out2.bytes());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < h; ++j) ASSERT_EQ(lo_t.get(j * n + i), lo.get(i * h + j)) << i << "," << j;
}

}  // namespace
}  // namespace mlakit
