// LatentAttention's rejections: each names the argument (mlakit::Error's kind and argument), a
// rejected run() writes nothing, a rejected plan() leaves the previous plan in force; the
// config (dims, dtypes, page size, cache format, capacities) and, on CUDA, what the Hopper kernel
// does not take.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mlakit/latent.h"
#include "mlakit/runtime.h"
#include "util/latent_case.h"
#include "util/latent_check.h"

namespace mlakit {
namespace test {
namespace {

LatentConfig small_config() {
  LatentConfig c;
  c.num_heads = 4;
  c.kv_lora_rank = 64;
  c.qk_rope_head_dim = 32;
  c.block_size = 16;
  c.num_blocks = 8;
  c.max_batch = 4;
  c.max_q_tokens = 16;
  c.max_kv_tokens = 100;
  c.max_topk = 32;
  return c;
}

template <class F>
void expect_config_error(F&& change, ErrorKind kind, const char* arg) {
  LatentConfig c = small_config();
  change(c);
  EXPECT_TRUE(throws_error([&] { LatentAttention a(c); }, kind, arg)) << arg;
  EXPECT_TRUE(throws_error([&] { LatentAttention::workspace_sizes(c); }, kind, arg)) << arg;
}

TEST(LatentValidation, Config) {
  const auto inv = ErrorKind::kInvalidArgument;
  expect_config_error([](LatentConfig& c) { c.num_heads = 0; }, inv, "config.num_heads");
  expect_config_error([](LatentConfig& c) { c.num_heads = 129; }, inv, "config.num_heads");
  expect_config_error([](LatentConfig& c) { c.kv_lora_rank = 48; }, inv, "config.kv_lora_rank");
  expect_config_error([](LatentConfig& c) { c.kv_lora_rank = 544; }, inv, "config.kv_lora_rank");
  expect_config_error([](LatentConfig& c) { c.qk_rope_head_dim = 0; }, inv, "config.qk_rope_head_dim");
  expect_config_error([](LatentConfig& c) { c.dtype = DType::kFP32; }, ErrorKind::kTypeMismatch, "config.dtype");
  expect_config_error(
      [](LatentConfig& c) {
        c.kv_cache_dtype = KvCacheDtype::kFp8;  // read with bf16 only
        c.dtype = DType::kFP16;
      },
      inv, "config.kv_cache_dtype");
  // fp8_ds_mla's rows fix the widths (512, 64) and the dtype (bf16): small_config's are refused.
  expect_config_error([](LatentConfig& c) { c.kv_cache_dtype = KvCacheDtype::kFp8DsMla; }, inv,
                      "config.kv_cache_dtype");
  expect_config_error(
      [](LatentConfig& c) {
        c.kv_cache_dtype = KvCacheDtype::kFp8DsMla;
        c.kv_lora_rank = 512;
        c.qk_rope_head_dim = 64;
        c.dtype = DType::kFP16;
      },
      inv, "config.kv_cache_dtype");
  expect_config_error([](LatentConfig& c) { c.block_size = 3; }, inv, "config.block_size");
  expect_config_error([](LatentConfig& c) { c.block_size = 512; }, inv, "config.block_size");
  expect_config_error([](LatentConfig& c) { c.num_blocks = 0; }, inv, "config.num_blocks");
  expect_config_error([](LatentConfig& c) { c.max_batch = 0; }, inv, "config.max_batch");
  expect_config_error([](LatentConfig& c) { c.max_q_tokens = 0; }, inv, "config.max_q_tokens");
  expect_config_error([](LatentConfig& c) { c.max_kv_tokens = -1; }, inv, "config.max_kv_tokens");
  expect_config_error([](LatentConfig& c) { c.max_topk = -1; }, inv, "config.max_topk");
  expect_config_error([](LatentConfig& c) { c.kv_split_size = 100; }, inv, "config.kv_split_size");
  // Every page size the API promises is taken.
  for (int bs : {1, 2, 16, 64, 128, 256}) {
    LatentConfig c = small_config();
    c.block_size = bs;
    EXPECT_NO_THROW(LatentAttention a(c)) << bs;
  }
}

TEST(LatentValidation, CudaTakesOnlyTheDeepSeekWidths) {
  // Without a GPU the device is refused; with one, widths other than (512, 64) are refused naming
  // kv_lora_rank whatever the GPU (an sm_90 one runs (512, 64): tests/gpu/test_latent_cuda.cc).
  LatentConfig c = small_config();
  c.device = Device::cuda(0);
  const char* arg = cuda_device_count() > 0 ? "config.kv_lora_rank" : "config.device";
  EXPECT_TRUE(throws_error([&] { LatentAttention a(c); }, ErrorKind::kUnsupported, arg));
  EXPECT_TRUE(throws_error([&] { LatentAttention::workspace_sizes(c); }, ErrorKind::kUnsupported, arg));
}

// A valid small problem and the object for it, planned once.
struct Fixture {
  LatentCase m;
  LatentAttention attn;
  explicit Fixture(int topk = 0)
      : m(make(topk)), attn(m.cfg) {
    attn.plan(m.batch(), m.opts);
  }
  static LatentCase make(int topk) {
    LatentCase m = make_latent_case(small_config(), {1, 3}, {40, 10}, 90);
    if (topk > 0) add_sparse(m, topk, LatentIndices::kPositions, 91, true);
    return m;
  }
};

TEST(LatentValidation, PlanArguments) {
  Fixture f;
  const LatentCase& m = f.m;
  const auto inv = ErrorKind::kInvalidArgument;
  auto plan = [&](LatentBatch b, LatentPlanOptions o = {}) { return [&f, b, o] { f.attn.plan(b, o); }; };
  LatentBatch b = m.batch();
  b.batch_size = 5;
  EXPECT_TRUE(throws_error(plan(b), inv, "batch_size"));
  b = m.batch();
  b.batch_size = -1;
  EXPECT_TRUE(throws_error(plan(b), inv, "batch_size"));
  b = m.batch();
  b.query_lens = nullptr;
  EXPECT_TRUE(throws_error(plan(b), inv, "query_lens"));
  std::vector<int32_t> q = {1, -1}, big_q = {10, 7}, kv = {40, -2}, big_kv = {60, 60};
  b = m.batch();
  b.query_lens = q.data();
  EXPECT_TRUE(throws_error(plan(b), inv, "query_lens"));
  b.query_lens = big_q.data();
  EXPECT_TRUE(throws_error(plan(b), inv, "query_lens"));  // 17 > max_q_tokens 16
  b = m.batch();
  b.kv_lens = kv.data();
  EXPECT_TRUE(throws_error(plan(b), inv, "kv_lens"));
  b.kv_lens = nullptr;
  EXPECT_TRUE(throws_error(plan(b), inv, "kv_lens"));
  b = m.batch();
  b.block_table = nullptr;
  EXPECT_TRUE(throws_error(plan(b), inv, "block_table"));
  b = m.batch();
  b.block_table_cols = 1;  // request 0 needs 3 blocks
  EXPECT_TRUE(throws_error(plan(b), inv, "block_table"));
  std::vector<int32_t> table = m.block_table;
  table[1] = 8;  // outside num_blocks
  b = m.batch();
  b.block_table = table.data();
  EXPECT_TRUE(throws_error(plan(b), inv, "block_table"));
  table[1] = -1;
  EXPECT_TRUE(throws_error(plan(b), inv, "block_table"));
  // Within the table's columns but past the total capacity of cached tokens (100).
  LatentConfig c = m.cfg;
  b = m.batch();
  b.kv_lens = big_kv.data();
  std::vector<int32_t> wide(2 * 4, 0);
  b.block_table = wide.data();
  b.block_table_cols = 4;
  EXPECT_TRUE(throws_error(plan(b), inv, "kv_lens"));

  LatentPlanOptions o;
  o.sm_scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws_error(plan(m.batch(), o), inv, "options.sm_scale"));
  o = {};
  o.sm_scale = -1.0f;
  EXPECT_TRUE(throws_error(plan(m.batch(), o), inv, "options.sm_scale"));
  o = {};
  o.topk = 33;  // > max_topk
  EXPECT_TRUE(throws_error(plan(m.batch(), o), inv, "options.topk"));
  o.topk = -1;
  EXPECT_TRUE(throws_error(plan(m.batch(), o), inv, "options.topk"));
  o.topk = 8;
  o.indices = static_cast<LatentIndices>(7);
  EXPECT_TRUE(throws_error(plan(m.batch(), o), inv, "options.indices"));
  // A dense-only object takes no sparse plan.
  c.max_topk = 0;
  LatentAttention dense_only(c);
  o = {};
  o.topk = 8;
  EXPECT_TRUE(throws_error([&] { dense_only.plan(m.batch(), o); }, inv, "options.topk"));
}

TEST(LatentValidation, RejectedPlanKeepsThePreviousOne) {
  Fixture f;
  const LatentResult before = run_latent(f.m, &f.attn);
  LatentBatch bad = f.m.batch();
  bad.batch_size = 9;
  EXPECT_THROW(f.attn.plan(bad), Error);
  EXPECT_TRUE(f.attn.planned());
  // run() without plan(): the plan in force is still the good one.
  const int64_t rows = f.m.q.shape()[0];
  HostTensor out(DType::kBF16, {rows, 4, 64});
  TensorView keep[5];
  f.attn.run(f.m.layer(keep), out.view());
  EXPECT_TRUE(same_bits(out, before.out));
}

TEST(LatentValidation, RunBeforePlan) {
  const LatentCase m = Fixture::make(0);
  LatentAttention attn(m.cfg);
  HostTensor out(DType::kBF16, {4, 4, 64});
  TensorView keep[5];
  EXPECT_TRUE(throws_error([&] { attn.run(m.layer(keep), out.view()); }, ErrorKind::kInvalidArgument, "plan"));
}

// run() with one tensor changed: it must throw naming `arg` and leave out (and lse) untouched.
struct RunCheck {
  Fixture& f;
  HostTensor out, lse;
  explicit RunCheck(Fixture& fx) : f(fx), out(DType::kBF16, {4, 4, 64}), lse(DType::kFP32, {4, 4}) {}
  template <class Change>
  void expect(Change&& change, ErrorKind kind, const char* arg) {
    out.fill_bytes(0xAB);
    lse.fill_bytes(0xAB);
    TensorView keep[5];
    LatentLayer y = f.m.layer(keep);
    TensorView o = out.view(), l = lse.view();
    TensorView* lp = &l;
    change(y, o, lp);
    EXPECT_TRUE(throws_error([&] { f.attn.run(y, o, lp); }, kind, arg)) << arg;
    for (uint8_t b : out.bytes()) ASSERT_EQ(b, 0xAB) << arg << ": out written by a rejected run";
    for (uint8_t b : lse.bytes()) ASSERT_EQ(b, 0xAB) << arg << ": lse written by a rejected run";
  }
};

TEST(LatentValidation, RunTensorsDense) {
  Fixture f;
  RunCheck c(f);
  const auto inv = ErrorKind::kInvalidArgument, type = ErrorKind::kTypeMismatch;
  HostTensor q_heads(DType::kBF16, {4, 5, 96}), q_dims(DType::kBF16, {4, 4, 95}), q_rows(DType::kBF16, {3, 4, 96});
  HostTensor q_f32(DType::kFP32, {4, 4, 96}), q_nope(DType::kBF16, {4, 4, 64}), q_pe_bad(DType::kBF16, {4, 4, 16});
  HostTensor cache_bad(DType::kBF16, {8, 8, 96}), cache_f16(DType::kFP16, {8, 16, 96});
  HostTensor out_dims(DType::kBF16, {4, 4, 96}), out_f32(DType::kFP32, {4, 4, 64});
  HostTensor lse_f64(DType::kFP64, {4, 4}), lse_heads(DType::kFP32, {4, 3}), idx(DType::kInt32, {4, 32});
  HostTensor sink_bad(DType::kFP32, {5}), sink_f16(DType::kFP16, {4});
  TensorView extra;
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) { y.q = q_heads.view(); }, inv, "q");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) { y.q = q_dims.view(); }, inv, "q");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) { y.q = q_rows.view(); }, inv, "q");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) { y.q = q_f32.view(); }, type, "q");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) { y.q.device = Device::cuda(0); }, type, "q");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) { y.q.strides[2] = 2; }, inv, "q");
  // q_pe given: q is q_nope [T, H, L]; a full-width q with it is wrong, and so is a bad q_pe.
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) {
    extra = q_pe_bad.view();
    y.q_pe = &extra;
  }, inv, "q");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) {
    extra = q_pe_bad.view();
    y.q = q_nope.view();
    y.q_pe = &extra;
  }, inv, "q_pe");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) { y.kv_cache = cache_bad.view(); }, inv, "kv_cache");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) { y.kv_cache = cache_f16.view(); }, type, "kv_cache");
  c.expect([&](LatentLayer&, TensorView& o, TensorView*&) { o = out_dims.view(); }, inv, "out");
  c.expect([&](LatentLayer&, TensorView& o, TensorView*&) { o = out_f32.view(); }, type, "out");
  c.expect([&](LatentLayer&, TensorView& o, TensorView*&) { o.strides[1] = 0; }, inv, "out");
  c.expect([&](LatentLayer&, TensorView&, TensorView*& l) {
    extra = lse_f64.view();
    l = &extra;
  }, type, "lse");
  c.expect([&](LatentLayer&, TensorView&, TensorView*& l) {
    extra = lse_heads.view();
    l = &extra;
  }, inv, "lse");
  c.expect([&](LatentLayer&, TensorView&, TensorView*& l) { l->strides[1] = 0; }, inv, "lse");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) {
    extra = lse_heads.view();
    y.max_logits = &extra;
  }, inv, "max_logits");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) {
    extra = idx.view();
    y.indices = &extra;
  }, inv, "indices");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) {
    extra = sink_bad.view();
    y.attn_sink = &extra;
  }, inv, "attn_sink");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) {
    extra = sink_f16.view();
    y.attn_sink = &extra;
  }, type, "attn_sink");
}

TEST(LatentValidation, RunTensorsSparse) {
  Fixture f(32);
  RunCheck c(f);
  const auto inv = ErrorKind::kInvalidArgument, type = ErrorKind::kTypeMismatch;
  HostTensor idx_wide(DType::kInt32, {4, 33}), idx_rows(DType::kInt32, {3, 32}), idx_f32(DType::kFP32, {4, 32});
  HostTensor len_rows(DType::kInt32, {3}), len_2d(DType::kInt32, {4, 1});
  TensorView extra;
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) { y.indices = nullptr; }, inv, "indices");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) {
    extra = idx_wide.view();
    y.indices = &extra;
  }, inv, "indices");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) {
    extra = idx_rows.view();
    y.indices = &extra;
  }, inv, "indices");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) {
    extra = idx_f32.view();
    y.indices = &extra;
  }, type, "indices");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) {
    extra = len_rows.view();
    y.topk_length = &extra;
  }, inv, "topk_length");
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) {
    extra = len_2d.view();
    y.topk_length = &extra;
  }, inv, "topk_length");
  // A dense plan takes no topk_length.
  f.attn.plan(f.m.batch(), LatentPlanOptions{});
  c.expect([&](LatentLayer& y, TensorView&, TensorView*&) { y.indices = nullptr; }, inv, "topk_length");
}

TEST(LatentValidation, WorkspaceSizesGrowWithCapacity) {
  LatentConfig c = small_config();
  const WorkspaceSizes a = LatentAttention::workspace_sizes(c);
  c.max_kv_tokens *= 100;
  c.max_batch *= 4;
  const WorkspaceSizes b = LatentAttention::workspace_sizes(c);
  EXPECT_GT(a.host_bytes, 0u);
  EXPECT_GT(b.host_bytes, a.host_bytes);
  EXPECT_GT(b.device_bytes, a.device_bytes);
}

}  // namespace
}  // namespace test
}  // namespace mlakit
