// RaggedPrefill's plan/run contract on the CPU backend: re-planning, capacity, workspaces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "mlakit/mlakit.h"
#include "plan/scheduler.h"
#include "util/test_util.h"

namespace mlakit {
namespace {

using test::HostTensor;
using test::throws_error;

constexpr int H = 4, HKV = 1, DQK = 32, DVO = 16;

PrefillConfig small_config() {
  PrefillConfig c;
  c.num_qo_heads = H;
  c.num_kv_heads = HKV;
  c.head_dim_qk = DQK;
  c.head_dim_vo = DVO;
  c.dtype = DType::kBF16;
  c.max_batch = 6;
  c.max_q_tokens = 600;
  c.max_kv_tokens = 800;
  return c;
}

struct Batch {
  std::vector<int32_t> qo, kv;
  HostTensor q, k, v;
  int batch() const { return static_cast<int>(qo.size()) - 1; }
};

Batch make_batch(const std::vector<int32_t>& ql, const std::vector<int32_t>& kl, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch b;
  b.qo = test::make_indptr(ql);
  b.kv = test::make_indptr(kl);
  b.q = HostTensor(DType::kBF16, {b.qo.back(), H, DQK});
  b.k = HostTensor(DType::kBF16, {b.kv.back(), HKV, DQK});
  b.v = HostTensor(DType::kBF16, {b.kv.back(), HKV, DVO});
  b.q.fill_normal(rng);
  b.k.fill_normal(rng);
  b.v.fill_normal(rng);
  return b;
}

// Runs p on b, returns out (bf16) and lse; checks both against the float64 reference.
void run_and_check(const RaggedPrefill& p, const Batch& b, const PrefillOptions& opt, HostTensor* out_keep = nullptr) {
  HostTensor out(DType::kBF16, {b.qo.back(), H, DVO}), lse(DType::kFP32, {b.qo.back(), H});
  TensorView lv = lse.view();
  p.run(b.q.view(), b.k.view(), b.v.view(), out.view(), &lv);
  HostTensor ref(DType::kFP64, out.shape()), ref_lse(DType::kFP64, lse.shape());
  TensorView rl = ref_lse.view();
  reference::ragged_prefill(b.q.view(), b.k.view(), b.v.view(), b.qo.data(), b.kv.data(), b.batch(), opt,
                            ref.view(), &rl);
  EXPECT_LT(test::relative_error(out, ref), 2e-2);
  for (int64_t i = 0; i < lse.numel(); ++i) {
    const double r = ref_lse.get(i), g = lse.get(i);
    if (std::isinf(r)) {
      EXPECT_TRUE(std::isinf(g) && g < 0) << "lse[" << i << "] = " << g << ", expected -inf";
    } else {
      EXPECT_NEAR(g, r, 1e-3 * (1 + std::fabs(r))) << "lse[" << i << "]";
    }
  }
  if (out_keep) *out_keep = out;
}

TEST(PlanRunApi, ReplanChangesInfoAndResults) {
  RaggedPrefill p(small_config());
  EXPECT_FALSE(p.planned());
  Batch a = make_batch({100, 1, 0, 65}, {100, 30, 5, 200}, 1);
  Batch b = make_batch({7, 300}, {7, 333}, 2);
  PrefillOptions causal;
  causal.causal = true;
  p.plan(a.qo.data(), a.kv.data(), a.batch(), causal);
  ASSERT_TRUE(p.planned());
  const PlanInfo ia = p.info();
  EXPECT_EQ(ia.batch_size, 4);
  EXPECT_EQ(ia.total_q, 166);
  EXPECT_EQ(ia.total_kv, 335);
  EXPECT_EQ(ia.num_tiles, 2 + 1 + 0 + 2);
  EXPECT_EQ(ia.block_m, 64);
  EXPECT_GT(ia.grid_blocks, 0);
  int64_t pairs = 0;
  for (int s = 0; s < a.batch(); ++s)
    pairs += plan::visible_pairs(a.qo[s + 1] - a.qo[s], a.kv[s + 1] - a.kv[s], true, -1);
  EXPECT_EQ(ia.visible_pairs, pairs);
  EXPECT_TRUE(p.options().causal);
  run_and_check(p, a, causal);

  PrefillOptions win;
  win.window_left = 16;
  win.sm_scale = 0.3f;
  p.plan(b.qo.data(), b.kv.data(), b.batch(), win);
  const PlanInfo ib = p.info();
  EXPECT_EQ(ib.batch_size, 2);
  EXPECT_EQ(ib.total_q, 307);
  EXPECT_EQ(ib.total_kv, 340);
  EXPECT_EQ(ib.num_tiles, 1 + 5);
  EXPECT_EQ(ib.visible_pairs, plan::visible_pairs(7, 7, false, 16) + plan::visible_pairs(300, 333, false, 16));
  EXPECT_FALSE(p.options().causal);
  EXPECT_EQ(p.options().window_left, 16);
  run_and_check(p, b, win);
  // The old tensors no longer fit the plan.
  HostTensor out(DType::kBF16, {a.qo.back(), H, DVO});
  EXPECT_TRUE(throws_error([&] { p.run(a.q.view(), a.k.view(), a.v.view(), out.view()); },
                           ErrorKind::kInvalidArgument, "q"));
}

TEST(PlanRunApi, RejectedPlanKeepsPreviousPlan) {
  RaggedPrefill p(small_config());
  Batch a = make_batch({40, 90}, {50, 90}, 3);
  PrefillOptions opt;
  opt.causal = true;
  opt.logits_soft_cap = 20.0f;
  p.plan(a.qo.data(), a.kv.data(), a.batch(), opt);
  HostTensor before;
  run_and_check(p, a, opt, &before);
  const PlanInfo info = p.info();

  const std::vector<int32_t> bad = {0, 10, 5};
  const std::vector<int32_t> huge = test::make_indptr({601});
  PrefillOptions bad_opt;
  bad_opt.window_left = -7;
  EXPECT_THROW(p.plan(bad.data(), a.kv.data(), 2), Error);
  EXPECT_THROW(p.plan(huge.data(), huge.data(), 1), Error);
  EXPECT_THROW(p.plan(a.qo.data(), a.kv.data(), a.batch(), bad_opt), Error);
  EXPECT_THROW(p.plan(a.qo.data(), a.kv.data(), 7), Error);

  const PlanInfo after = p.info();
  EXPECT_EQ(after.batch_size, info.batch_size);
  EXPECT_EQ(after.total_q, info.total_q);
  EXPECT_EQ(after.num_tiles, info.num_tiles);
  EXPECT_EQ(after.visible_pairs, info.visible_pairs);
  EXPECT_TRUE(p.options().causal);
  EXPECT_EQ(p.options().logits_soft_cap, 20.0f);
  HostTensor again;
  run_and_check(p, a, opt, &again);
  EXPECT_EQ(again.bytes(), before.bytes());
}

TEST(PlanRunApi, CapacityErrors) {
  const PrefillConfig c = small_config();
  RaggedPrefill p(c);
  const std::vector<int32_t> seven = test::make_indptr(std::vector<int32_t>(7, 1));
  EXPECT_TRUE(throws_error([&] { p.plan(seven.data(), seven.data(), 7); }, ErrorKind::kInvalidArgument, "batch_size"));
  const auto q_over = test::make_indptr({300, 301}), kv_ok = test::make_indptr({1, 1});
  EXPECT_TRUE(throws_error([&] { p.plan(q_over.data(), kv_ok.data(), 2); }, ErrorKind::kInvalidArgument, "qo_indptr"));
  const auto q_ok = test::make_indptr({1, 1}), kv_over = test::make_indptr({400, 401});
  EXPECT_TRUE(throws_error([&] { p.plan(q_ok.data(), kv_over.data(), 2); }, ErrorKind::kInvalidArgument, "kv_indptr"));
  EXPECT_FALSE(p.planned());
  // Exactly at capacity is fine, and lengths spread to maximize tiles fit max_tiles.
  const auto q_full = test::make_indptr({1, 1, 1, 1, 1, 595}), kv_full = test::make_indptr({0, 0, 0, 0, 0, 800});
  EXPECT_NO_THROW(p.plan(q_full.data(), kv_full.data(), 6));
  EXPECT_EQ(p.info().num_tiles, 5 + 10);
  const auto q_odd = test::make_indptr({65, 65, 65, 65, 65, 65});
  EXPECT_NO_THROW(p.plan(q_odd.data(), test::make_indptr({1, 1, 1, 1, 1, 1}).data(), 6));
  EXPECT_EQ(p.info().num_tiles, 12);
}

TEST(PlanRunApi, WorkspaceSizesMonotoneInCapacity) {
  PrefillConfig c = small_config();
  WorkspaceSizes prev = RaggedPrefill::workspace_sizes(c);
  const WorkspaceSizes first = prev;
  EXPECT_GT(prev.host_bytes, 0u);
  EXPECT_GT(prev.device_bytes, 0u);
  for (int step = 0; step < 30; ++step) {
    PrefillConfig n = c;
    if (step % 3 == 0) n.max_batch = c.max_batch * 2 + 1;
    if (step % 3 == 1) n.max_q_tokens = c.max_q_tokens * 3 + 7;
    if (step % 3 == 2) n.max_kv_tokens = c.max_kv_tokens * 2 + 1;
    const WorkspaceSizes s = RaggedPrefill::workspace_sizes(n);
    EXPECT_GE(s.host_bytes, prev.host_bytes) << "step " << step;
    EXPECT_GE(s.device_bytes, prev.device_bytes) << "step " << step;
    c = n;
    prev = s;
    if (c.max_q_tokens > (int64_t{1} << 28)) break;
  }
  // Steps are rounded to 256 bytes, but a much larger capacity needs much more room.
  EXPECT_GT(prev.host_bytes, 100 * first.host_bytes);
  EXPECT_GT(prev.device_bytes, 100 * first.device_bytes);
  // Host staging holds the double buffer: at least twice the device block.
  EXPECT_GE(prev.host_bytes, 2 * prev.device_bytes);
}

struct AlignedBuf {
  explicit AlignedBuf(size_t n) : p(std::aligned_alloc(256, (n + 256 + 255) / 256 * 256)) {}
  ~AlignedBuf() { std::free(p); }
  void* p;
};

TEST(PlanRunApi, CallerProvidedWorkspace) {
  const PrefillConfig c = small_config();
  const WorkspaceSizes s = RaggedPrefill::workspace_sizes(c);
  AlignedBuf host(s.host_bytes), dev(s.device_bytes);
  RaggedPrefill p(c, host.p, s.host_bytes, dev.p, s.device_bytes);
  RaggedPrefill owning(c);
  Batch b = make_batch({33, 0, 129}, {33, 4, 250}, 9);
  PrefillOptions opt;
  opt.causal = true;
  opt.window_left = 40;
  for (RaggedPrefill* x : {&p, &owning}) x->plan(b.qo.data(), b.kv.data(), b.batch(), opt);
  HostTensor o1, o2;
  run_and_check(p, b, opt, &o1);
  run_and_check(owning, b, opt, &o2);
  EXPECT_EQ(o1.bytes(), o2.bytes());
  EXPECT_EQ(p.info().num_tiles, owning.info().num_tiles);
}

TEST(PlanRunApi, CallerWorkspaceRejected) {
  const PrefillConfig c = small_config();
  const WorkspaceSizes s = RaggedPrefill::workspace_sizes(c);
  AlignedBuf host(s.host_bytes), dev(s.device_bytes);
  const ErrorKind inv = ErrorKind::kInvalidArgument;
  EXPECT_TRUE(throws_error([&] { RaggedPrefill p(c, host.p, s.host_bytes - 1, dev.p, s.device_bytes); }, inv, "host_workspace"));
  EXPECT_TRUE(throws_error([&] { RaggedPrefill p(c, host.p, s.host_bytes, dev.p, s.device_bytes - 1); }, inv, "device_workspace"));
  EXPECT_TRUE(throws_error([&] { RaggedPrefill p(c, nullptr, s.host_bytes, dev.p, s.device_bytes); }, inv, "host_workspace"));
  EXPECT_TRUE(throws_error([&] { RaggedPrefill p(c, host.p, s.host_bytes, nullptr, s.device_bytes); }, inv, "device_workspace"));
  void* off = static_cast<char*>(dev.p) + 16;
  EXPECT_TRUE(throws_error([&] { RaggedPrefill p(c, host.p, s.host_bytes, off, s.device_bytes); }, inv, "device_workspace"));
  // A bigger config needs more than this workspace.
  PrefillConfig big = c;
  big.max_q_tokens *= 4;
  EXPECT_TRUE(throws_error([&] { RaggedPrefill p(big, host.p, s.host_bytes, dev.p, s.device_bytes); }, inv, "host_workspace"));
}

TEST(PlanRunApi, EmptyBatchAndEmptySequences) {
  RaggedPrefill p(small_config());
  const int32_t zero[1] = {0};
  p.plan(zero, zero, 0);
  EXPECT_EQ(p.info().num_tiles, 0);
  HostTensor q(DType::kBF16, {0, H, DQK}), k(DType::kBF16, {0, HKV, DQK}), v(DType::kBF16, {0, HKV, DVO});
  HostTensor o(DType::kBF16, {0, H, DVO});
  EXPECT_NO_THROW(p.run(q.view(), k.view(), v.view(), o.view()));
  // lk == 0 rows get out = 0 and lse = -inf; lq == 0 sequences are skipped.
  Batch b = make_batch({3, 0, 70}, {0, 9, 0}, 4);
  p.plan(b.qo.data(), b.kv.data(), b.batch());
  EXPECT_EQ(p.info().num_tiles, 1 + 2);
  HostTensor out(DType::kBF16, {73, H, DVO}), lse(DType::kFP32, {73, H});
  out.fill_bytes(0x7f);
  lse.fill_bytes(0x7f);
  TensorView lv = lse.view();
  p.run(b.q.view(), b.k.view(), b.v.view(), out.view(), &lv);
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.get(i), 0.0) << i;
  for (int64_t i = 0; i < lse.numel(); ++i) ASSERT_TRUE(std::isinf(lse.get(i)) && lse.get(i) < 0) << i;
}

TEST(PlanRunApi, OneShotMatchesPlanRun) {
  Batch b = make_batch({17, 64, 1}, {40, 64, 99}, 11);
  PrefillOptions opt;
  opt.causal = true;
  RaggedPrefill p(small_config());
  p.plan(b.qo.data(), b.kv.data(), b.batch(), opt);
  HostTensor o1;
  run_and_check(p, b, opt, &o1);
  HostTensor o2(DType::kBF16, o1.shape());
  ragged_prefill(b.q.view(), b.k.view(), b.v.view(), b.qo.data(), b.kv.data(), b.batch(), opt, o2.view());
  EXPECT_EQ(o1.bytes(), o2.bytes());
}

TEST(Runtime, HalfConversionsRoundTripAndRound) {
  // Exact values survive; ties round to even.
  EXPECT_EQ(fp16_to_float(float_to_fp16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(fp16_to_float(float_to_fp16(65520.0f))));
  EXPECT_EQ(fp16_to_float(float_to_fp16(65519.0f)), 65504.0f);
  EXPECT_EQ(fp16_to_float(float_to_fp16(5.9604645e-08f)), 5.9604645e-08f);  // smallest subnormal
  EXPECT_EQ(fp16_to_float(float_to_fp16(2.9802322e-08f)), 0.0f);            // half of it: tie to 0
  EXPECT_EQ(fp16_to_float(float_to_fp16(1.0f + 1.0f / 2048)), 1.0f);         // tie -> even
  EXPECT_EQ(fp16_to_float(float_to_fp16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)), 1.0f);          // tie -> even
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3.0f / 256)), 1.0f + 2.0f / 128);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::nanf("")))));
  // Every fp16 and bf16 bit pattern (non-NaN) round-trips through float exactly.
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(f)) ASSERT_EQ(float_to_fp16(f), h) << std::hex << h;
    const float g = bf16_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(g)) ASSERT_EQ(float_to_bf16(g), h) << std::hex << h;
  }
}

TEST(Runtime, CpuMemoryAndTensorBasics) {
  EXPECT_EQ(cuda_device_count() > 0, cuda_unavailable_reason().empty());
  void* p = device_alloc(1000, Device::cpu());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  fill_bytes(p, Device::cpu(), 0x3c, 1000);
  std::vector<uint8_t> h(1000);
  copy_bytes(h.data(), Device::cpu(), p, Device::cpu(), 1000);
  for (uint8_t x : h) ASSERT_EQ(x, 0x3c);
  device_free(p, Device::cpu());
  void* pin = pinned_alloc(333);
  ASSERT_NE(pin, nullptr);
  pinned_free(pin);
  EXPECT_EQ(device_description(Device::cpu()), "cpu");

  alignas(16) uint16_t buf[64];
  TensorView t(buf, DType::kBF16, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.ptr_at(1, 2, 3), static_cast<void*>(buf + 12 + 8 + 3));
  TensorView s(buf, DType::kBF16, {2, 3, 4}, {20, 4, 1}, Device::cuda(1));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.ptr_at(1, 1), static_cast<void*>(buf + 24));
  EXPECT_EQ(s.describe(), "bf16[2, 3, 4] strides [20, 4, 1] on cuda:1");
  EXPECT_EQ(dtype_size(DType::kFP64), 8u);
  EXPECT_STREQ(dtype_name(DType::kFP16), "fp16");
  EXPECT_EQ(to_string(Device::cpu()), "cpu");
}

}  // namespace
}  // namespace mlakit
