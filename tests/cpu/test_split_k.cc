// Split K (RaggedPrefill::run_split_k) on the CPU backend: K read as a per-head part and a RoPE
// part shared by every head gives exactly the result of the same K concatenated, and matches the
// float64 reference; bad split-K tensors are rejected by name with nothing written. Also the
// CUDA launch arguments built for it (plain host arithmetic).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attention_cases.h"
#include "core/launch_args.h"
#include "mlakit/mlakit.h"
#include "util/split_k_case.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {
namespace {

PrefillConfig config_for(const SplitKProblem& p, DType t) {
  PrefillConfig c;
  c.num_qo_heads = p.heads;
  c.num_kv_heads = p.kv_heads;
  c.head_dim_qk = p.dqk();
  c.head_dim_vo = p.dvo;
  c.dtype = t;
  c.max_batch = p.batch();
  c.max_q_tokens = std::max<int64_t>(1, p.qo.back());
  c.max_kv_tokens = std::max<int64_t>(1, p.kv.back());
  return c;
}

bool all_finite(const HostTensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.get(i))) return false;
  return true;
}

struct SplitCase {
  int heads, kv_heads, dn, rope, dvo;
  bool causal;
};

class CpuSplitK : public ::testing::TestWithParam<SplitCase> {};

TEST_P(CpuSplitK, EqualsConcatenatedKAndReference) {
  const SplitCase sc = GetParam();
  const DType t = DType::kBF16;
  // MLA-like latent rows: 512 + RoPE columns.
  const SplitKProblem p = make_split_k_problem(t, sc.heads, sc.kv_heads, sc.dn, sc.rope, sc.dvo,
                                               512 + sc.rope, {70, 1, 0, 130}, {70, 40, 3, 200}, 7);
  RaggedPrefill attn(config_for(p, t));
  PrefillOptions o = opts(sc.causal);
  attn.plan(p.qo.data(), p.kv.data(), p.batch(), o);
  const int64_t tq = p.qo.back();

  HostTensor out_split(t, {tq, p.heads, p.dvo}), lse_split(DType::kFP32, {tq, p.heads});
  out_split.fill_bytes(0xFF);  // NaN poison
  lse_split.fill_bytes(0xFF);
  TensorView ls = lse_split.view();
  attn.run_split_k(p.q.view(), k_part(p.kv_buf.view(), p.dn), rope_part(p.latent.view(), p.rope),
                   v_part(p.kv_buf.view(), p.dn, p.dvo), out_split.view(), &ls);
  ASSERT_TRUE(all_finite(out_split));

  HostTensor out_plain(t, {tq, p.heads, p.dvo}), lse_plain(DType::kFP32, {tq, p.heads});
  TensorView lp = lse_plain.view();
  attn.run(p.q.view(), p.k_full.view(), p.v.view(), out_plain.view(), &lp);
  // The same values in the same order: bit for bit.
  EXPECT_EQ(out_split.bytes(), out_plain.bytes());
  EXPECT_EQ(lse_split.bytes(), lse_plain.bytes());

  HostTensor ref(DType::kFP64, {tq, p.heads, p.dvo});
  reference::ragged_prefill(p.q.view(), p.k_full.view(), p.v.view(), p.qo.data(), p.kv.data(),
                            p.batch(), o, ref.view(), nullptr);
  EXPECT_LE(relative_error(out_split, ref), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuSplitK,
                         ::testing::Values(SplitCase{4, 4, 128, 64, 128, true},
                                           SplitCase{4, 4, 128, 64, 128, false},
                                           SplitCase{4, 2, 56, 8, 64, true},   // grouped heads
                                           SplitCase{2, 1, 64, 64, 64, true}));

TEST(CpuSplitK, PerHeadRopeAndBroadcastView) {
  // k_rope given per kv head ([T, Hkv, R]) and as a 3-D view with head stride 0: both equal the
  // concatenated K.
  const DType t = DType::kBF16;
  const int heads = 4, kvh = 2, dn = 24, rope = 8, dvo = 16;
  SplitKProblem p = make_split_k_problem(t, heads, kvh, dn, rope, dvo, 40, {33, 9}, {50, 9}, 3);
  HostTensor rope_h(t, {p.kv.back(), kvh, rope});
  std::mt19937_64 rng(11);
  rope_h.fill_normal(rng);
  HostTensor k_full(t, {p.kv.back(), kvh, dn + rope});
  for (int64_t j = 0; j < p.kv.back(); ++j)
    for (int h = 0; h < kvh; ++h) {
      for (int d = 0; d < dn; ++d) k_full.set((j * kvh + h) * (dn + rope) + d, p.kv_buf.get((j * kvh + h) * (dn + dvo) + d));
      for (int d = 0; d < rope; ++d) k_full.set((j * kvh + h) * (dn + rope) + dn + d, rope_h.get((j * kvh + h) * rope + d));
    }
  RaggedPrefill attn(config_for(p, t));
  attn.plan(p.qo.data(), p.kv.data(), p.batch(), opts(true));
  const int64_t tq = p.qo.back();
  HostTensor a(t, {tq, heads, dvo}), b(t, {tq, heads, dvo});
  a.fill_bytes(0xFF);
  attn.run_split_k(p.q.view(), k_part(p.kv_buf.view(), dn), rope_h.view(), v_part(p.kv_buf.view(), dn, dvo), a.view());
  attn.run(p.q.view(), k_full.view(), p.v.view(), b.view());
  ASSERT_TRUE(all_finite(a));
  EXPECT_EQ(a.bytes(), b.bytes());

  // Broadcast through a zero head stride: [T, Hkv, R] whose rows are the latent's RoPE columns.
  TensorView shared = rope_part(p.latent.view(), rope);
  TensorView bcast(shared.data, t, {p.kv.back(), kvh, rope}, {shared.strides[0], 0, 1});
  a.fill_bytes(0xFF);
  attn.run_split_k(p.q.view(), k_part(p.kv_buf.view(), dn), bcast, v_part(p.kv_buf.view(), dn, dvo), a.view());
  attn.run(p.q.view(), p.k_full.view(), p.v.view(), b.view());
  ASSERT_TRUE(all_finite(a));
  EXPECT_EQ(a.bytes(), b.bytes());
}

TEST(CpuSplitK, BadTensorsRejectedByNameNothingWritten) {
  const DType t = DType::kBF16;
  SplitKProblem p = make_split_k_problem(t, 4, 2, 56, 8, 64, 64, {20, 5}, {20, 9}, 5);
  RaggedPrefill attn(config_for(p, t));
  attn.plan(p.qo.data(), p.kv.data(), p.batch(), opts(true));
  const int64_t tq = p.qo.back(), tk = p.kv.back();
  HostTensor out(t, {tq, 4, 64});
  out.fill_bytes(0xAB);
  const std::vector<uint8_t> before = out.bytes();
  const TensorView k = k_part(p.kv_buf.view(), 56), v = v_part(p.kv_buf.view(), 56, 64);
  const TensorView kr = rope_part(p.latent.view(), 8);

  HostTensor kr_fp16(DType::kFP16, {tk, 8});
  EXPECT_TRUE(throws_error([&] { attn.run_split_k(p.q.view(), k, kr_fp16.view(), v, out.view()); },
                           ErrorKind::kTypeMismatch, "k_rope"));
  HostTensor kr_short(t, {tk - 1, 8});
  EXPECT_TRUE(throws_error([&] { attn.run_split_k(p.q.view(), k, kr_short.view(), v, out.view()); },
                           ErrorKind::kInvalidArgument, "k_rope"));
  HostTensor kr_heads(t, {tk, 3, 8});
  EXPECT_TRUE(throws_error([&] { attn.run_split_k(p.q.view(), k, kr_heads.view(), v, out.view()); },
                           ErrorKind::kInvalidArgument, "k_rope"));
  // k's width plus the RoPE width must be q's head dim.
  EXPECT_TRUE(throws_error([&] { attn.run_split_k(p.q.view(), k_part(p.kv_buf.view(), 48), kr, v, out.view()); },
                           ErrorKind::kInvalidArgument, "k"));
  // RoPE width not a multiple of 8 (and k narrowed to match).
  TensorView kr6 = rope_part(p.latent.view(), 6);
  EXPECT_TRUE(throws_error([&] { attn.run_split_k(p.q.view(), k_part(p.kv_buf.view(), 58), kr6, v, out.view()); },
                           ErrorKind::kInvalidArgument, "k_rope"));
  HostTensor kr4d(t, {tk, 1, 1, 8});
  EXPECT_TRUE(throws_error([&] { attn.run_split_k(p.q.view(), k, kr4d.view(), v, out.view()); },
                           ErrorKind::kInvalidArgument, "k_rope"));
  EXPECT_EQ(out.bytes(), before);
}

TEST(LaunchArgs, SplitKFieldsFromViews) {
  // The strides the CUDA kernels get for the MLA layout: K/V interleaved per head in the
  // up-projection output, the RoPE key inside 576-wide latent rows, shared by every head.
  const int64_t tk = 10, h = 16;
  std::vector<uint16_t> kvbuf(static_cast<size_t>(tk * h * 256)), lat(static_cast<size_t>(tk * 576)),
      q(static_cast<size_t>(4 * h * 192)), o(static_cast<size_t>(4 * h * 128));
  TensorView kvv(kvbuf.data(), DType::kBF16, {tk, h, 256});
  TensorView k = k_part(kvv, 128), v = v_part(kvv, 128, 128);
  TensorView latv(lat.data(), DType::kBF16, {tk, 576});
  TensorView kr2 = rope_part(latv, 64);
  TensorView kr(kr2.data, DType::kBF16, {tk, 1, 64}, {576, 0, 1});
  TensorView qv(q.data(), DType::kBF16, {4, h, 192}), ov(o.data(), DType::kBF16, {4, h, 128});
  backend::AttentionCall c;
  c.q = &qv;
  c.k = &k;
  c.k_rope = &kr;
  c.v = &v;
  c.out = &ov;
  c.num_qo_heads = c.num_kv_heads = static_cast<int>(h);
  c.head_dim_qk = 192;
  c.head_dim_vo = 128;
  const cuda::PrefillArgs a = backend::make_prefill_args(c);
  EXPECT_EQ(a.k, kvbuf.data());
  EXPECT_EQ(a.v, kvbuf.data() + 128);
  EXPECT_EQ(a.k_stride_tok, h * 256);
  EXPECT_EQ(a.k_stride_head, 256);
  EXPECT_EQ(a.v_stride_tok, h * 256);
  EXPECT_EQ(a.k_rope, lat.data() + 512);
  EXPECT_EQ(a.kr_stride_tok, 576);
  EXPECT_EQ(a.kr_stride_head, 0);
  EXPECT_EQ(a.k_rope_dim, 64);
  EXPECT_EQ(a.kv_rows, tk);
  EXPECT_EQ(a.q_rows, 4);
  EXPECT_EQ(a.lse, nullptr);
  // Plain K: no RoPE part.
  c.k_rope = nullptr;
  const cuda::PrefillArgs b = backend::make_prefill_args(c);
  EXPECT_EQ(b.k_rope, nullptr);
  EXPECT_EQ(b.k_rope_dim, 0);
  // No descales: null pointers (factor 1).
  EXPECT_EQ(b.q_descale, nullptr);
  EXPECT_EQ(b.k_descale, nullptr);
  EXPECT_EQ(b.v_descale, nullptr);
}

TEST(LaunchArgs, DescalePointersAndStrides) {
  std::vector<uint8_t> q(4 * 2 * 64), kv(6 * 2 * 64), o(4 * 2 * 64 * 2);
  std::vector<float> qd(8 * 2), kd(2 * 16);
  TensorView qv(q.data(), DType::kE4M3, {4, 2, 64}), kvv(kv.data(), DType::kE4M3, {6, 2, 64}),
      ov(o.data(), DType::kBF16, {4, 2, 64});
  TensorView qdv(qd.data(), DType::kFP32, {8, 2});                 // [max_batch, Hkv]
  TensorView kdv(kd.data(), DType::kFP32, {16, 2}, {1, 16});       // an [Hkv, max_batch] buffer, transposed
  backend::AttentionCall c;
  c.q = &qv;
  c.k = &kvv;
  c.v = &kvv;
  c.out = &ov;
  c.descales = Descales{&qdv, &kdv, nullptr};
  const cuda::PrefillArgs a = backend::make_prefill_args(c);
  EXPECT_EQ(a.q_descale, qd.data());
  EXPECT_EQ(a.qd_stride_b, 2);
  EXPECT_EQ(a.qd_stride_h, 1);
  EXPECT_EQ(a.k_descale, kd.data());
  EXPECT_EQ(a.kd_stride_b, 1);
  EXPECT_EQ(a.kd_stride_h, 16);
  EXPECT_EQ(a.v_descale, nullptr);
}

}  // namespace
}  // namespace test
}  // namespace mlakit
