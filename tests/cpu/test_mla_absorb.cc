// The MLA step's absorbed requests on the CPU backend (mlakit/mla.h, absorb_max_query_len): which
// requests the step absorbs (new tokens 1 .. the limit, no more than the context, in order up to
// the capacity), and a step that mixes absorbed and up-projected requests against the float64
// reference of the non-absorbed step, in one launch, with context chunks, with launches sized
// for a CUDA graph, on 16-bit and FP8 caches (an lse of transposed strides: test_mla_step.cc);
// the cache it writes; steps that read what absorbed steps wrote; and the configs it refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mla/absorb_choice.h"
#include "mlakit/mlakit.h"
#include "util/mla_case.h"
#include "util/mla_steps.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {
namespace {

MlaBatch lens_batch(const std::vector<int32_t>& q, const std::vector<int32_t>& ctx) {
  MlaBatch b;
  b.batch_size = static_cast<int>(q.size());
  b.query_lens = q.data();
  b.context_lens = ctx.data();
  return b;
}

TEST(MlaAbsorbChoice, FewNewTokensAgainstALongerContextInOrderUpToTheCapacity) {
  const std::vector<int32_t> q{1, 4, 5, 3, 0, 2, 1}, ctx{9, 4, 100, 2, 50, 10, 0};
  std::vector<uint8_t> flags(q.size(), 9);
  const mla::AbsorbChoice c = mla::choose_absorbed(lens_batch(q, ctx), {4, 4}, 1000, flags.data());
  // 5 > the limit; 3 > its context of 2; no new token; no context.
  EXPECT_EQ(flags, (std::vector<uint8_t>{1, 1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(c.requests, 3);
  EXPECT_EQ(c.tokens, 7);
  EXPECT_EQ(c.up_context, 100 + 2 + 50 + 0);
  // The capacity is taken in request order: 1 + 4 fit 6, the 2 after them do not.
  const mla::AbsorbChoice capped = mla::choose_absorbed(lens_batch(q, ctx), {4, 4}, 6, flags.data());
  EXPECT_EQ(flags, (std::vector<uint8_t>{1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(capped.tokens, 5);
  EXPECT_EQ(capped.up_context, 100 + 2 + 50 + 10 + 0);
  EXPECT_EQ(mla::choose_absorbed(lens_batch(q, ctx), {0, 0}, 1000, flags.data()).requests, 0);
  EXPECT_EQ(flags, std::vector<uint8_t>(q.size(), 0));
}

TEST(MlaAbsorbChoice, AStepThatAlsoUpProjectsTakesTheMixedLimit) {
  std::vector<uint8_t> flags(4, 9);
  // 1 and 6 qualify at 8; 40 (over 100) does not: the step is mixed, and the limit becomes 2.
  const std::vector<int32_t> q{1, 6, 40, 0}, ctx{50, 70, 100, 5};
  const mla::AbsorbChoice mixed = mla::choose_absorbed(lens_batch(q, ctx), {8, 2}, 1000, flags.data());
  EXPECT_EQ(flags, (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_EQ(mixed.tokens, 1);
  EXPECT_EQ(mixed.up_context, 70 + 100 + 5);
  // Every request with new tokens qualifies (the idle one does not count): the full limit.
  const std::vector<int32_t> q2{1, 6, 0}, ctx2{50, 70, 0};
  EXPECT_EQ(mla::choose_absorbed(lens_batch(q2, ctx2), {8, 2}, 1000, flags.data()).tokens, 7);
  // A request with more new tokens than context makes the step mixed as well.
  const std::vector<int32_t> q3{1, 6, 3}, ctx3{50, 70, 2};
  EXPECT_EQ(mla::choose_absorbed(lens_batch(q3, ctx3), {8, 2}, 1000, flags.data()).tokens, 1);
  // A sparse step's forced parts never make it mixed, and are taken whatever the limits.
  const std::vector<uint8_t> forced{0, 1, 1, 0};
  const mla::AbsorbChoice sparse = mla::choose_absorbed(lens_batch(q, ctx), {0, 0}, 1000, flags.data(), forced.data());
  EXPECT_EQ(flags, (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ(sparse.tokens, 46);
}

TEST(MlaAbsorbChoice, CudasOwnRuleSplitsTheRowsOfAMixedStepsRequests) {
  // The latent kernel splits a request's keys across SMs up to 128 (token, head) rows.
  EXPECT_EQ(mla::absorb_rule(64, true, 16).mixed_max_query_len, 8);
  EXPECT_EQ(mla::absorb_rule(64, true, 128).mixed_max_query_len, 1);
  EXPECT_EQ(mla::absorb_rule(64, true, 1).mixed_max_query_len, 64);  // 128 capped by the limit
  EXPECT_EQ(mla::absorb_rule(64, true, 16).max_query_len, 64);
  // An explicit limit, and the CPU's own: one limit for every step.
  EXPECT_EQ(mla::absorb_rule(64, false, 16).mixed_max_query_len, 64);
  EXPECT_EQ(mla::absorb_rule(0, true, 16).mixed_max_query_len, 0);
}

MlaConfig dims(int heads = 4, int lora = 64, int block_size = 16) {
  MlaConfig c;
  c.num_heads = heads;
  c.kv_lora_rank = lora;
  c.block_size = block_size;
  c.dtype = DType::kBF16;
  return c;
}

// Decode (1), MTP (2, 3) and extend (4) requests among prefill chunks, one with no new token, one
// whose new tokens outnumber its context (up-projected), contexts across blocks.
struct Mixed {
  std::vector<int32_t> q{1, 17, 2, 4, 0, 3, 9, 1};
  std::vector<int32_t> ctx{40, 20, 1, 33, 12, 70, 5, 0};
};

TEST(CpuMlaAbsorb, MixedStepMatchesTheReferenceAndWritesTheCache) {
  for (int bs : {16, 64}) {
    SCOPED_TRACE("block_size " + std::to_string(bs));
    const Mixed x;
    MlaCase m = make_mla_case(dims(4, 64, bs), x.q, x.ctx, 300 + bs);
    m.cfg.absorb_max_query_len = 4;
    HostTensor cache_after;
    const StepResult r = run_step(m, m.cfg, &cache_after);
    // 1 (ctx 40), 4 (ctx 33), 3 (ctx 70); 2 > ctx 1, 1 with ctx 0, 17, 9 and 0 up-project.
    EXPECT_EQ(r.info.absorbed_requests, 3);
    EXPECT_EQ(r.info.absorbed_tokens, 8);
    EXPECT_EQ(r.info.absorb_max_query_len, 4);
    EXPECT_FALSE(r.info.chunked);
    expect_matches(r, m, mla_reference(m));
    EXPECT_EQ(cache_after.bytes(), expected_cache(m).bytes());
  }
}

TEST(CpuMlaAbsorb, AgreesWithTheUpProjectionOnEveryRequest) {
  const Mixed x;
  MlaCase m = make_mla_case(dims(), x.q, x.ctx, 31);
  MlaConfig up = m.cfg, absorbing = m.cfg;
  up.absorb_max_query_len = 0;
  absorbing.absorb_max_query_len = 64;
  const StepResult a = run_step(m, up), b = run_step(m, absorbing);
  EXPECT_EQ(a.info.absorbed_requests, 0);
  EXPECT_EQ(b.info.absorbed_requests, 4);  // every request with 1 <= q <= ctx
  const int64_t n = m.total_q() * m.cfg.num_heads;
  std::vector<double> oa = a.out.to_doubles(), ob = b.out.to_doubles(), la = a.lse.to_doubles(),
                      lb = b.lse.to_doubles();
  oa.resize(static_cast<size_t>(n * m.cfg.v_head_dim));
  ob.resize(oa.size());
  la.resize(static_cast<size_t>(n));
  lb.resize(la.size());
  EXPECT_LE(relative_error(ob, oa), 1e-2);
  EXPECT_LE(lse_error(lb, la), 1e-2);
}

TEST(CpuMlaAbsorb, EveryRequestAbsorbedDecodeStep) {
  // A decode step: one new token each over contexts of 1 .. 200; the up-projection only writes
  // the cache. fp16 too.
  for (DType t : {DType::kBF16, DType::kFP16}) {
    SCOPED_TRACE(dtype_name(t));
    MlaConfig c = dims(8, 64, 16);
    c.dtype = t;
    MlaCase m = make_mla_case(c, {1, 1, 1, 1, 1}, {1, 15, 16, 17, 200}, 77);
    m.cfg.absorb_max_query_len = 1;
    HostTensor cache_after;
    const StepResult r = run_step(m, m.cfg, &cache_after);
    EXPECT_EQ(r.info.absorbed_requests, 5);
    expect_matches(r, m, mla_reference(m));
    EXPECT_EQ(cache_after.bytes(), expected_cache(m).bytes());
  }
}

TEST(CpuMlaAbsorb, ContextChunksGraphRowsAndTheCapacity) {
  const Mixed x;
  MlaCase m = make_mla_case(dims(), x.q, x.ctx, 57, 3, /*extra_q_rows=*/5);
  m.cfg.absorb_max_query_len = 4;
  const MlaRef ref = mla_reference(m);
  {
    SCOPED_TRACE("context chunks of 24 rows");
    MlaConfig cfg = m.cfg;
    cfg.workspace_rows = 40;
    HostTensor cache_after;
    const StepResult r = run_step(m, cfg, &cache_after);
    ASSERT_TRUE(r.info.chunked);
    EXPECT_EQ(r.info.absorbed_requests, 3);
    // Only the up-projected requests' context is chunked: 20 + 1 + 12 + 5 + 0 rows.
    EXPECT_EQ(r.info.num_context_chunks, 1);
    expect_matches(r, m, ref);
    EXPECT_EQ(cache_after.bytes(), expected_cache(m).bytes());
  }
  {
    SCOPED_TRACE("graph rows");
    MlaConfig cfg = m.cfg;
    cfg.max_absorbed_tokens = 16;
    MlaStep step(cfg);
    const int64_t rows = step.gathered_rows(m.batch());
    EXPECT_EQ(rows, m.total_q() + 20 + 1 + 12 + 5 + 0);
    MlaPlanOptions o;
    o.graph_rows = rows + 7;
    step.plan(m.batch(), o);
    HostTensor cache = m.cache;
    const StepResult r = run_planned(step, m, cache);
    EXPECT_EQ(r.info.launch_rows, rows + 7);
    expect_matches(r, m, ref);
    EXPECT_EQ(cache.bytes(), expected_cache(m).bytes());
    // Rows past the step (the bucket's) are never written.
    const int64_t per_row = cfg.num_heads * cfg.v_head_dim;
    for (int64_t i = m.total_q() * per_row; i < r.out.numel(); ++i) ASSERT_TRUE(std::isnan(r.out.get(i))) << i;
    o.graph_rows = rows - 1;
    EXPECT_TRUE(throws_error([&] { step.plan(m.batch(), o); }, ErrorKind::kInvalidArgument, "options.graph_rows"));
    // graph_absorbed_tokens bounds what the graph absorbs: 0 none (the step up-projects all), 5
    // the first two absorbable requests (1 + 4 tokens).
    EXPECT_EQ(step.absorbed_tokens(m.batch()), 8);
    for (int64_t g : {0, 5}) {
      SCOPED_TRACE("graph_absorbed_tokens " + std::to_string(g));
      o.graph_rows = m.total_q() + m.total_ctx();
      o.graph_absorbed_tokens = g;
      step.plan(m.batch(), o);
      EXPECT_EQ(step.info().absorbed_tokens, g);
      HostTensor c2 = m.cache;
      expect_matches(run_planned(step, m, c2), m, ref);
      EXPECT_EQ(c2.bytes(), expected_cache(m).bytes());
    }
    o.graph_absorbed_tokens = 17;  // above config.max_absorbed_tokens
    EXPECT_TRUE(
        throws_error([&] { step.plan(m.batch(), o); }, ErrorKind::kInvalidArgument, "options.graph_absorbed_tokens"));
  }
  {
    SCOPED_TRACE("capacity of 5 absorbed tokens");
    MlaConfig cfg = m.cfg;
    cfg.max_absorbed_tokens = 5;
    const StepResult r = run_step(m, cfg);
    EXPECT_EQ(r.info.absorbed_requests, 2);  // 1 and 4; the 3 after them up-projects
    EXPECT_EQ(r.info.absorbed_tokens, 5);
    expect_matches(r, m, ref);
  }
}

TEST(CpuMlaAbsorb, Fp8Caches) {
  // The latent attention decodes the cache rows as the up-projection's gather does.
  for (KvCacheDtype f : {KvCacheDtype::kFp8DsMla, KvCacheDtype::kFp8}) {
    SCOPED_TRACE(kv_cache_dtype_name(f));
    MlaConfig c = dims(4, 512, 64);
    c.kv_cache_dtype = f;
    MlaCase m = make_mla_case(c, {1, 12, 2, 3}, {70, 9, 130, 3}, 5);
    m.cfg.absorb_max_query_len = 3;
    HostTensor cache_after;
    const StepResult r = run_step(m, m.cfg, &cache_after);
    EXPECT_EQ(r.info.absorbed_requests, 3);
    expect_matches(r, m, mla_reference(m));
    EXPECT_EQ(cache_after.bytes(), expected_cache(m).bytes());
  }
}

TEST(CpuMlaAbsorb, LaterStepsReadWhatAbsorbedStepsWrote) {
  // A prefill, two decode steps and an MTP step on one cache and one re-planned step (plan
  // uploaded by the first run() too): a new token missing from the cache, or at the wrong slot,
  // fails the steps after it.
  for (bool upload_in_run : {false, true}) {
    SCOPED_TRACE(upload_in_run ? "upload_in_run" : "upload in plan");
    MlaConfig cfg = dims(4, 64, 16);
    cfg.absorb_max_query_len = 2;
    const std::vector<MlaCase> cases =
        make_prefill_steps(cfg, {0, 30, 70}, {{20, 5, 3}, {1, 1, 1}, {1, 0, 2}, {2, 2, 1}}, 11, /*extra_q_rows=*/3);
    MlaConfig scfg = cases[0].cfg;
    scfg.upload_in_run = upload_in_run;
    MlaStep step(scfg);
    HostTensor cache = cases[0].cache;
    for (size_t s = 0; s < cases.size(); ++s) {
      SCOPED_TRACE("step " + std::to_string(s));
      const MlaCase& m = cases[s];
      step.plan(m.batch());
      EXPECT_EQ(step.info().absorbed_requests, s == 0 ? 0 : (s == 2 ? 2 : 3));
      expect_matches(run_planned(step, m, cache), m, mla_reference(m));
      EXPECT_EQ(cache.bytes(), expected_cache(m).bytes()) << "cache after the step";
    }
  }
}

TEST(CpuMlaAbsorb, RefusedConfigsNameTheField) {
  MlaConfig c = dims();
  c.num_blocks = 8;
  c.max_batch = 2;
  c.max_tokens = 16;
  c.max_context_tokens = 64;
  c.absorb_max_query_len = -2;
  EXPECT_TRUE(throws_error([&] { MlaStep s(c); }, ErrorKind::kInvalidArgument, "config.absorb_max_query_len"));
  c.absorb_max_query_len = 4;
  c.max_absorbed_tokens = -1;
  EXPECT_TRUE(throws_error([&] { MlaStep s(c); }, ErrorKind::kInvalidArgument, "config.max_absorbed_tokens"));
  c.max_absorbed_tokens = 0;
  c.block_size = 24;  // the latent attention's pages are powers of two
  EXPECT_TRUE(throws_error([&] { MlaStep s(c); }, ErrorKind::kInvalidArgument, "config.absorb_max_query_len"));
  c.absorb_max_query_len = -1;  // automatic: the step up-projects instead
  EXPECT_EQ(MlaStep(c).info().absorb_max_query_len, 0);
  c.block_size = 16;
  EXPECT_GT(MlaStep(c).info().absorb_max_query_len, 0);  // the CPU backend's measured crossover
  c.absorb_max_query_len = 4;
  c.fp8_attention = true;
  EXPECT_TRUE(throws_error([&] { MlaStep s(c); }, ErrorKind::kUnsupported, "config.absorb_max_query_len"));
}

}  // namespace
}  // namespace test
}  // namespace mlakit
