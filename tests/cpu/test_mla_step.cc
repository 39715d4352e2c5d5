// The MLA step on the CPU backend against the float64 reference of the whole step: context
// lengths 0, 1, not a multiple of the block size and larger than the workspace chunk, block sizes
// 16 and 64, shuffled block tables, chunk-size independence, the cache write (fused into the
// first launch's gather) and its round trip through later steps, bucket-sized tensors (their
// padding rows never written to the cache), plan reuse across layers, an allocation-free re-plan,
// an lse of any non-overlapping strides, and rejected inputs (named, nothing written).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "alloc_count.h"
#include "mlakit/mlakit.h"
#include "util/mla_case.h"
#include "util/mla_steps.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {
namespace {

// Real per-head dims (128 + 64, 128) with a small latent and few heads, so the float64 reference
// stays fast; the DeepSeek shapes run in their own test. Every request up-projects (chunking and
// graph rows count every context); absorbed requests: test_mla_absorb.cc.
MlaConfig small_dims(int heads = 4, int lora = 64, int block_size = 16) {
  MlaConfig c;
  c.num_heads = heads;
  c.kv_lora_rank = lora;
  c.block_size = block_size;
  c.dtype = DType::kBF16;
  c.absorb_max_query_len = 0;
  return c;
}

struct Lens {
  std::vector<int32_t> q, ctx;
};

class CpuMlaStep : public ::testing::TestWithParam<int> {};  // block size

TEST_P(CpuMlaStep, MatchesReferenceAndWritesCache) {
  const int bs = GetParam();
  // Context 0, 1, not a multiple of the block size, several blocks; a request with no new token.
  const Lens l{{5, 1, 30, 0, 17}, {0, 1, 37, 9, 130}};
  const MlaCase m = make_mla_case(small_dims(4, 64, bs), l.q, l.ctx, 100 + bs);
  HostTensor cache_after;
  const StepResult r = run_step(m, m.cfg, &cache_after);
  EXPECT_FALSE(r.info.chunked);
  EXPECT_EQ(r.info.total_q, m.total_q());
  EXPECT_EQ(r.info.total_context, m.total_ctx());
  expect_matches(r, m, mla_reference(m));
  // Round trip: the new tokens' latents at their slots, every other cache row untouched.
  EXPECT_EQ(cache_after.bytes(), expected_cache(m).bytes());
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, CpuMlaStep, ::testing::Values(16, 64));

TEST(CpuMlaStep, DeepSeekShapes) {
  // DeepSeek-Coder-V2-Lite's attention dims (16 heads, latent 512) at small lengths.
  const MlaCase m = make_mla_case(small_dims(16, 512, 64), {40, 3}, {70, 0}, 5);
  expect_matches(run_step(m, m.cfg), m, mla_reference(m));
}

TEST(CpuMlaStep, ChunkSizeIndependence) {
  // Contexts larger than the workspace: chunks of 40, 57 and 100 rows, merged by LSE, agree with
  // the single launch and with the reference.
  const Lens l{{20, 1, 15}, {150, 1, 63}};
  const MlaCase m = make_mla_case(small_dims(), l.q, l.ctx, 9);
  const MlaRef ref = mla_reference(m);
  const StepResult fused = run_step(m, m.cfg);
  EXPECT_FALSE(fused.info.chunked);
  expect_matches(fused, m, ref);
  for (int rows : {40, 57, 100}) {
    SCOPED_TRACE("workspace_rows " + std::to_string(rows));
    MlaConfig cfg = m.cfg;
    cfg.workspace_rows = rows;
    HostTensor cache_after;
    const StepResult r = run_step(m, cfg, &cache_after);
    ASSERT_TRUE(r.info.chunked);
    EXPECT_EQ(r.info.num_context_chunks, (m.total_ctx() + rows - 1) / rows);
    expect_matches(r, m, ref);
    // Beyond rounding, the result does not depend on the chunking.
    std::vector<double> a = r.out.to_doubles(), b = fused.out.to_doubles();
    EXPECT_LE(relative_error(a, b), 1e-2);
    EXPECT_EQ(cache_after.bytes(), expected_cache(m).bytes());
  }
}

TEST(CpuMlaStep, ExplicitSlotMappingEqualsBlockTable) {
  const MlaCase m = make_mla_case(small_dims(), {9, 20}, {3, 16}, 13);
  HostTensor c1, c2;
  const StepResult a = run_step(m, m.cfg, &c1, {}, false);
  const StepResult b = run_step(m, m.cfg, &c2, {}, true);
  EXPECT_EQ(a.out.bytes(), b.out.bytes());
  EXPECT_EQ(c1.bytes(), c2.bytes());
}

TEST(CpuMlaStep, BucketSizedTensorsAndGraphRows) {
  // Layer tensors with more rows than the step (a token bucket) and launches padded to
  // graph_rows: same results, rows past the step untouched.
  const MlaCase m = make_mla_case(small_dims(), {12, 7}, {20, 0}, 17, 3, /*extra_q_rows=*/13);
  MlaConfig cfg = m.cfg;
  cfg.max_tokens = 64;
  cfg.workspace_rows = 128;
  MlaPlanOptions o;
  o.graph_rows = 100;
  HostTensor cache_after;
  const StepResult r = run_step(m, cfg, &cache_after, o);
  EXPECT_EQ(r.info.launch_rows, 100);
  expect_matches(r, m, mla_reference(m));
  // Only the step's tokens reach the cache: the bucket's padding rows of kv_c / k_pe do not.
  EXPECT_EQ(cache_after.bytes(), expected_cache(m).bytes());
  const int64_t per_row = cfg.num_heads * cfg.v_head_dim;
  for (int64_t i = m.total_q() * per_row; i < r.out.numel(); ++i) ASSERT_TRUE(std::isnan(r.out.get(i))) << i;
}

TEST(CpuMlaStep, LseTakesAnyNonOverlappingStrides) {
  // As RaggedPrefill::run: lse may be [T, H] or an [H, T] buffer seen through a transposed view
  // (FlashAttention's layout), in one launch, with context chunks merged through it, and with the
  // first request absorbed (its rows copied back into the view). The values are the same as
  // through a contiguous lse; an overlapping view is refused by name.
  const MlaCase m = make_mla_case(small_dims(), {12, 5}, {60, 3}, 41, 3, /*extra_q_rows=*/4);
  const int64_t rows = m.q.shape()[0], H = m.cfg.num_heads, tq = m.total_q();
  const std::pair<int, int64_t> settings[] = {{0, 0}, {0, 40}, {12, 0}, {12, 40}};
  for (const auto& [absorb, workspace_rows] : settings) {
    SCOPED_TRACE("absorb_max_query_len " + std::to_string(absorb) + ", workspace_rows " +
                 std::to_string(workspace_rows));
    MlaConfig cfg = m.cfg;
    cfg.workspace_rows = workspace_rows;
    cfg.absorb_max_query_len = absorb;
    const StepResult want = run_step(m, cfg);
    // Absorbing the first request leaves 17 + 3 gathered rows: no chunks.
    EXPECT_EQ(want.info.chunked, workspace_rows > 0 && absorb == 0);
    EXPECT_EQ(want.info.absorbed_requests, absorb > 0 ? 1 : 0);
    MlaStep step(cfg);
    step.plan(m.batch());
    HostTensor out(cfg.dtype, {rows, H, cfg.v_head_dim}), lse_ht(DType::kFP32, {H, rows});
    out.fill_bytes(0xFF);
    lse_ht.fill_bytes(0xFF);
    HostTensor cache = m.cache;
    MlaLayer y = m.layer();
    y.kv_cache = cache.view();
    const TensorView lse_t(lse_ht.data(), DType::kFP32, {rows, H}, {1, rows}, Device::cpu());
    step.run(y, out.view(), &lse_t);
    EXPECT_EQ(out.bytes(), want.out.bytes());
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const double got = lse_ht.get(h * rows + t), w = want.lse.get(t * H + h);
        if (t < tq) EXPECT_EQ(got, w) << t << "," << h;
        else EXPECT_TRUE(std::isnan(got)) << t << "," << h;  // rows past the step: not written
      }
    }
    out.fill_bytes(0xAB);
    const std::vector<uint8_t> before = out.bytes();
    const TensorView shared(lse_ht.data(), DType::kFP32, {rows, H}, {1, 0}, Device::cpu());
    EXPECT_TRUE(throws_error([&] { step.run(y, out.view(), &shared); }, ErrorKind::kInvalidArgument, "lse"));
    const TensorView into_next_row(lse_ht.data(), DType::kFP32, {rows, H}, {2, 1}, Device::cpu());
    EXPECT_TRUE(throws_error([&] { step.run(y, out.view(), &into_next_row); }, ErrorKind::kInvalidArgument, "lse"));
    EXPECT_EQ(out.bytes(), before);
  }
}

// A prefill over three steps on one cache: each step's context is (partly) what the steps before
// it wrote, so a new token missing from the cache, or written to the wrong slot, fails the next
// step. Starting contexts 0, shorter and longer than a block; a request idle in a step; block
// sizes 16 and 64; one launch per step, or context chunks smaller than the step's context; bucket
// rows past each step's tokens (never written); one MlaStep re-planned every step.
struct StepsParam {
  int block_size;
  int64_t workspace_rows;  // 0: one launch per step
  bool upload_in_run;      // MlaConfig::upload_in_run: the plan uploaded by the first run()
};

class CpuMlaSteps : public ::testing::TestWithParam<StepsParam> {};

TEST_P(CpuMlaSteps, LaterStepsReadWhatEarlierStepsWrote) {
  const StepsParam p = GetParam();
  MlaConfig cfg = small_dims(4, 64, p.block_size);
  cfg.workspace_rows = p.workspace_rows;
  const std::vector<MlaCase> cases =
      make_prefill_steps(cfg, {0, 5, 70, 0}, {{37, 11, 3, 0}, {20, 0, 64, 1}, {1, 40, 9, 17}}, 61 + p.block_size,
                         /*extra_q_rows=*/7);
  MlaConfig scfg = cases[0].cfg;
  scfg.upload_in_run = p.upload_in_run;
  MlaStep step(scfg);
  HostTensor cache = cases[0].cache;
  for (size_t s = 0; s < cases.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const MlaCase& m = cases[s];
    step.plan(m.batch());
    EXPECT_EQ(step.info().chunked, p.workspace_rows > 0);
    expect_matches(run_planned(step, m, cache), m, mla_reference(m));
    EXPECT_EQ(cache.bytes(), expected_cache(m).bytes()) << "cache after the step";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CpuMlaSteps,
                         ::testing::Values(StepsParam{16, 0, false}, StepsParam{64, 0, false},
                                           StepsParam{16, 90, false}, StepsParam{64, 100, false},
                                           StepsParam{16, 0, true}, StepsParam{64, 100, true}),
                         [](const ::testing::TestParamInfo<StepsParam>& i) {
                           return "bs" + std::to_string(i.param.block_size) + "_ws" +
                                  std::to_string(i.param.workspace_rows) +
                                  (i.param.upload_in_run ? "_upload_in_run" : "");
                         });

TEST(CpuMlaStep, ReplanAllocatesNothing) {
  // plan() runs every engine step on the host: once the step exists, re-planning (one launch or
  // chunked) must not touch the heap.
  const MlaCase a = make_mla_case(small_dims(), {9, 20, 4}, {3, 16, 40}, 67);
  for (int64_t ws : {int64_t{0}, int64_t{40}}) {
    SCOPED_TRACE("workspace_rows " + std::to_string(ws));
    MlaConfig cfg = a.cfg;
    cfg.workspace_rows = ws;
    MlaStep step(cfg);
    step.plan(a.batch());  // the first plan may set things up
    const MlaBatch b = a.batch(true);
    AllocCounter allocs;
    step.plan(b);
    step.plan(a.batch());
    EXPECT_EQ(allocs.count(), 0);
    EXPECT_EQ(step.info().chunked, ws > 0);
  }
}

TEST(CpuMlaStep, OnePlanManyLayers) {
  MlaCase m = make_mla_case(small_dims(), {10, 33}, {5, 40}, 21);
  MlaStep step(m.cfg);
  step.plan(m.batch());
  std::mt19937_64 rng(3);
  for (int layer = 0; layer < 3; ++layer) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    m.q.fill_normal(rng);
    m.kv_c.fill_normal(rng);
    m.w.fill_normal(rng, 0.125);
    m.cache.fill_normal(rng);
    const MlaRef ref = mla_reference(m);
    HostTensor out(m.cfg.dtype, {m.total_q(), m.cfg.num_heads, m.cfg.v_head_dim});
    out.fill_bytes(0xFF);
    step.run(m.layer(), out.view());
    EXPECT_LE(relative_error(out, ref.out), 1e-2);
  }
}

TEST(CpuMlaStep, ReplanAfterRejectedPlanKeepsPrevious) {
  for (bool upload_in_run : {false, true}) {
    SCOPED_TRACE(upload_in_run ? "upload in run" : "upload in plan");
    const MlaCase m = make_mla_case(small_dims(), {8, 8}, {4, 30}, 23);
    MlaConfig cfg = m.cfg;
    cfg.upload_in_run = upload_in_run;
    MlaStep step(cfg);
    step.plan(m.batch());
    // A block table with an id past the cache: rejected, the previous plan stays.
    std::vector<int32_t> bad = m.block_table;
    bad[0] = static_cast<int32_t>(m.cfg.num_blocks);
    MlaBatch b = m.batch();
    b.block_table = bad.data();
    EXPECT_TRUE(throws_error([&] { step.plan(b); }, ErrorKind::kInvalidArgument, "block_table"));
    HostTensor out(m.cfg.dtype, {m.total_q(), m.cfg.num_heads, m.cfg.v_head_dim});
    out.fill_bytes(0xFF);
    step.run(m.layer(), out.view());
    EXPECT_LE(relative_error(out, mla_reference(m).out), 1e-2);
  }
}

TEST(CpuMlaStep, BadInputsRejectedByNameNothingWritten) {
  const MlaCase m = make_mla_case(small_dims(), {6, 3}, {10, 0}, 29);
  MlaStep step(m.cfg);
  EXPECT_TRUE(throws_error([&] { step.run(m.layer(), m.q.view()); }, ErrorKind::kInvalidArgument, "plan"));

  // plan(): slot out of range, block table too short, a length past the capacity, graph rows.
  MlaBatch b = m.batch(true);
  std::vector<int64_t> slots = m.slot_mapping;
  slots[2] = m.cfg.num_blocks * m.cfg.block_size;
  b.slot_mapping = slots.data();
  EXPECT_TRUE(throws_error([&] { step.plan(b); }, ErrorKind::kInvalidArgument, "slot_mapping"));
  b = m.batch();
  b.block_table_cols = 0;
  EXPECT_TRUE(throws_error([&] { step.plan(b); }, ErrorKind::kInvalidArgument, "block_table_cols"));
  std::vector<int32_t> long_ctx = m.ctx_lens;
  long_ctx[0] += m.cols * m.cfg.block_size;  // more blocks than the row has
  b = m.batch();
  b.context_lens = long_ctx.data();
  EXPECT_TRUE(throws_error([&] { step.plan(b); }, ErrorKind::kInvalidArgument, "block_table"));
  std::vector<int32_t> many_q = m.q_lens;
  many_q[1] += static_cast<int32_t>(m.cfg.max_tokens);
  b = m.batch();
  b.query_lens = many_q.data();
  EXPECT_TRUE(throws_error([&] { step.plan(b); }, ErrorKind::kInvalidArgument, "query_lens"));
  MlaPlanOptions o;
  o.graph_rows = 3;  // fewer rows than the step's context + new tokens
  EXPECT_TRUE(throws_error([&] { step.plan(m.batch(), o); }, ErrorKind::kInvalidArgument, "options.graph_rows"));
  EXPECT_FALSE(step.planned());

  // run(): a weight of the wrong shape, a cache of the wrong shape, too few rows, wrong dtype.
  step.plan(m.batch());
  HostTensor cache = m.cache;
  HostTensor out(m.cfg.dtype, {m.total_q(), m.cfg.num_heads, m.cfg.v_head_dim});
  out.fill_bytes(0xAB);
  const std::vector<uint8_t> out_before = out.bytes(), cache_before = cache.bytes();
  MlaLayer y = m.layer();
  y.kv_cache = cache.view();
  auto expect_rejected = [&](MlaLayer bad, const TensorView& o2, ErrorKind kind, const std::string& name) {
    EXPECT_TRUE(throws_error([&] { step.run(bad, o2); }, kind, name));
    EXPECT_EQ(out.bytes(), out_before);
    EXPECT_EQ(cache.bytes(), cache_before);
  };
  HostTensor w_t(m.cfg.dtype, {m.cfg.kv_lora_rank, m.w.shape()[0]});  // transposed weight
  MlaLayer bad = y;
  bad.kv_b_proj = w_t.view();
  expect_rejected(bad, out.view(), ErrorKind::kInvalidArgument, "kv_b_proj");
  HostTensor small_cache(m.cfg.dtype, {m.cfg.num_blocks - 1, m.cfg.block_size, m.cache.shape()[2]});
  bad = y;
  bad.kv_cache = small_cache.view();
  expect_rejected(bad, out.view(), ErrorKind::kInvalidArgument, "kv_cache");
  bad = y;
  bad.kv_c.shape[0] = m.total_q() - 1;
  expect_rejected(bad, out.view(), ErrorKind::kInvalidArgument, "kv_c");
  HostTensor k_pe_fp16(DType::kFP16, {m.total_q(), m.cfg.qk_rope_head_dim});
  bad = y;
  bad.k_pe = k_pe_fp16.view();
  expect_rejected(bad, out.view(), ErrorKind::kTypeMismatch, "k_pe");
  HostTensor out32(DType::kFP32, {m.total_q(), m.cfg.num_heads, m.cfg.v_head_dim});
  expect_rejected(y, out32.view(), ErrorKind::kTypeMismatch, "out");
  expect_rejected(y, TensorView(out.data(), m.cfg.dtype, {m.total_q(), m.cfg.num_heads, 64}), ErrorKind::kInvalidArgument, "out");
}

TEST(CpuMlaStep, BadConfigsRejectedByName) {
  MlaConfig c = small_dims();
  c.num_blocks = 10;
  c.max_batch = 2;
  c.max_tokens = 100;
  MlaConfig bad = c;
  bad.workspace_rows = 50;  // a workspace too small for the new tokens
  EXPECT_TRUE(throws_error([&] { MlaStep s(bad); }, ErrorKind::kInvalidArgument, "config.workspace_rows"));
  bad = c;
  bad.kv_lora_rank = 60;
  EXPECT_TRUE(throws_error([&] { MlaStep s(bad); }, ErrorKind::kInvalidArgument, "config.kv_lora_rank"));
  bad = c;
  bad.num_blocks = 0;
  EXPECT_TRUE(throws_error([&] { MlaStep s(bad); }, ErrorKind::kInvalidArgument, "config.num_blocks"));
  bad = c;
  bad.dtype = DType::kFP32;
  EXPECT_TRUE(throws_error([&] { MlaStep s(bad); }, ErrorKind::kTypeMismatch, "config.dtype"));
  const WorkspaceSizes ws = MlaStep::workspace_sizes(c);
  EXPECT_GT(ws.host_bytes, 0u);
  EXPECT_GT(ws.device_bytes, ws.host_bytes / 2);
}

}  // namespace
}  // namespace test
}  // namespace mlakit
