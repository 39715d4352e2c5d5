// The MLA step for DeepSeek-V3.2 (MlaPlanOptions::topk) on the CPU backend: tokens at positions
// >= topk attend to the keys their row of the indexer's indices names, in latent space; the
// others densely (causal) through the up-projection; a request straddling topk is split. Against
// a float64 oracle written here (per sparse token: the named positions' latents up-projected in
// double, a softmax over them, repeats counted, -1 / out-of-range / past topk_length skipped) and
// the float64 dense reference for the dense tokens; the cache the step writes; context chunks and
// graph sizes; indices naming every causal key give the dense result; refusals by name.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mla/sparse_split.h"
#include "mlakit/mlakit.h"
#include "util/mla_case.h"
#include "util/mla_sparse_case.h"
#include "util/mla_steps.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {
namespace {

constexpr int kTopk = 16;

MlaConfig dims() {
  MlaConfig c;
  c.num_heads = 4;
  c.kv_lora_rank = 64;
  c.block_size = 16;
  c.dtype = DType::kBF16;
  c.max_topk = kTopk;
  return c;
}

TEST(MlaSparseSplit, TokensPastTopkFormTheirOwnPart) {
  mla::SparseSplit s(4);
  const std::vector<int32_t> q{40, 3, 4, 10, 0}, ctx{0, 30, 5, 10, 50};
  MlaBatch b;
  b.batch_size = 5;
  b.query_lens = q.data();
  b.context_lens = ctx.data();
  const MlaBatch& p = s.split(b, kTopk);
  // (0, 16) dense + (16, 24) sparse; (30, 3) sparse; (5, 4) dense; (10, 6) + (16, 4); (50, 0).
  ASSERT_EQ(p.batch_size, 7);
  const std::vector<int32_t> pq(p.query_lens, p.query_lens + 7), pc(p.context_lens, p.context_lens + 7);
  EXPECT_EQ(pq, (std::vector<int32_t>{16, 24, 3, 4, 6, 4, 0}));
  EXPECT_EQ(pc, (std::vector<int32_t>{0, 16, 30, 5, 10, 16, 50}));
  EXPECT_EQ(std::vector<uint8_t>(s.sparse(), s.sparse() + 7), (std::vector<uint8_t>{0, 1, 1, 0, 0, 1, 0}));
  EXPECT_EQ(s.sparse_tokens(), 31);
}

StepResult run_sparse(const MlaStep& step, const MlaCase& m, const SparseInputs& s, HostTensor& cache) {
  const TensorView idx = s.indices.view(), len = s.topk_length.view();
  return run_planned(step, m, cache, &idx, &len);
}

void expect_matches(const StepResult& r, const MlaCase& m, const Oracle& o) {
  expect_step_rows(r.out, r.lse, m, o.out, o.lse);
}

// A prompt straddling topk, a decode and an MTP past it, a short request wholly below it, an
// extend straddling it, an idle request.
const std::vector<int32_t> kQ{40, 1, 3, 4, 10, 0}, kCtx{0, 30, 17, 5, 10, 50};

TEST(CpuMlaSparseStep, MatchesTheOracleAndWritesTheCache) {
  for (int64_t workspace_rows : {int64_t{0}, int64_t{64}}) {
    SCOPED_TRACE("workspace_rows " + std::to_string(workspace_rows));
    MlaConfig cfg = dims();
    cfg.workspace_rows = workspace_rows;
    const MlaCase m = make_mla_case(cfg, kQ, kCtx, 21, 3, /*extra_q_rows=*/2);
    const SparseInputs s = make_indices(m, kTopk, 5);
    MlaStep step(m.cfg);
    MlaPlanOptions o;
    o.topk = kTopk;
    step.plan(m.batch(), o);
    EXPECT_EQ(step.info().sparse_tokens, 24 + 1 + 3 + 4);
    EXPECT_EQ(step.info().absorbed_tokens, 32);  // the sparse tokens only: dense ones up-project
    EXPECT_EQ(step.info().total_context, m.total_ctx());
    EXPECT_EQ(step.info().chunked, workspace_rows > 0);
    HostTensor cache = m.cache;
    const StepResult r = run_sparse(step, m, s, cache);
    expect_matches(r, m, sparse_oracle(m, kTopk, s));
    EXPECT_EQ(cache.bytes(), expected_cache(m).bytes());
  }
}

TEST(CpuMlaSparseStep, Fp8Caches) {
  // The sparse tokens' latent attention decodes the cache rows as the dense tokens' gather does.
  for (KvCacheDtype f : {KvCacheDtype::kFp8DsMla, KvCacheDtype::kFp8}) {
    SCOPED_TRACE(kv_cache_dtype_name(f));
    MlaConfig cfg = dims();
    cfg.kv_lora_rank = 512;
    cfg.kv_cache_dtype = f;
    const MlaCase m = make_mla_case(cfg, {40, 1, 3}, {0, 30, 17}, 23);
    const SparseInputs s = make_indices(m, kTopk, 6);
    MlaStep step(m.cfg);
    MlaPlanOptions o;
    o.topk = kTopk;
    step.plan(m.batch(), o);
    EXPECT_EQ(step.info().sparse_tokens, 24 + 1 + 3);
    HostTensor cache = m.cache;
    expect_matches(run_sparse(step, m, s, cache), m, sparse_oracle(m, kTopk, s));
    EXPECT_EQ(cache.bytes(), expected_cache(m).bytes());
  }
}

TEST(CpuMlaSparseStep, LaterStepsReadWhatEarlierStepsWrote) {
  // One prefill over three steps on one re-planned step and one cache, sized as a graph would be
  // (the GPU test replays these plans in one captured graph): a chunk straddling top-k beside an
  // extend past it, then MTP and decode steps that attend (sparsely) to what the first wrote.
  MlaConfig cfg = dims();
  cfg.max_tokens = 60;
  const std::vector<MlaCase> cases =
      make_prefill_steps(cfg, {0, 30}, {{40, 6}, {2, 3}, {1, 1}}, 31, 0, /*bucket_rows=*/60);
  MlaStep step(cases[0].cfg);
  MlaPlanOptions o;
  o.topk = kTopk;
  o.graph_rows = 128;
  o.graph_absorbed_tokens = 40;
  HostTensor cache = cases[0].cache;  // never reset
  for (size_t s = 0; s < cases.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const MlaCase& m = cases[s];
    const SparseInputs in = make_indices(m, kTopk, 40 + s);
    step.plan(m.batch(), o);
    ASSERT_GT(step.info().sparse_tokens, 0);
    expect_matches(run_sparse(step, m, in, cache), m, sparse_oracle(m, kTopk, in));
    EXPECT_EQ(cache.bytes(), expected_cache(m).bytes());
  }
}

TEST(CpuMlaSparseStep, IndicesNamingEveryCausalKeyGiveTheDenseResult) {
  // Contexts up to topk: the indexer selects every causal key, and the sparse tokens' result is
  // the dense step's. (Positions past topk here see topk keys at most: contexts below it.)
  const MlaCase m = make_mla_case(dims(), {3, 6}, {13, 10}, 8);
  MlaStep step(m.cfg);
  MlaPlanOptions o;
  o.topk = kTopk;
  step.plan(m.batch(), o);
  ASSERT_EQ(step.info().sparse_tokens, 0);  // 13..15 and 10..15 all below topk
  const SparseInputs s = make_indices(m, kTopk, 9, /*full=*/true);
  HostTensor cache = m.cache;
  expect_matches(run_sparse(step, m, s, cache), m, sparse_oracle(m, kTopk, s));
  o.topk = 12;  // now 12..15 are sparse, their rows naming 0..11 only: not the dense result
  MlaCase m12 = m;
  step.plan(m12.batch(), o);
  EXPECT_EQ(step.info().sparse_tokens, 3 + 4);
}

TEST(CpuMlaSparseStep, GraphSizesAndRefusals) {
  const MlaCase m = make_mla_case(dims(), kQ, kCtx, 33, 3, /*extra_q_rows=*/3);
  const SparseInputs s = make_indices(m, kTopk, 6);
  MlaConfig cfg = m.cfg;
  cfg.max_absorbed_tokens = 40;
  MlaStep step(cfg);
  EXPECT_EQ(step.absorbed_tokens(m.batch(), kTopk), 32);
  const int64_t rows = step.gathered_rows(m.batch(), kTopk);
  // Up-projected parts: (0, 16), (5, 4), (10, 6), (50, 0): their contexts 0 + 5 + 10 + 50.
  EXPECT_EQ(rows, m.total_q() + 65);
  MlaPlanOptions o;
  o.topk = kTopk;
  o.graph_rows = rows;
  o.graph_absorbed_tokens = 40;
  step.plan(m.batch(), o);
  HostTensor cache = m.cache;
  expect_matches(run_sparse(step, m, s, cache), m, sparse_oracle(m, kTopk, s));
  EXPECT_EQ(cache.bytes(), expected_cache(m).bytes());
  // The sparse tokens must fit: refused by name, the plan in force kept.
  o.graph_absorbed_tokens = 31;
  EXPECT_TRUE(throws_error([&] { step.plan(m.batch(), o); }, ErrorKind::kInvalidArgument, "options.topk"));
  EXPECT_EQ(step.info().sparse_tokens, 32);
  o.graph_absorbed_tokens = 40;
  o.topk = kTopk + 1;
  EXPECT_TRUE(throws_error([&] { step.plan(m.batch(), o); }, ErrorKind::kInvalidArgument, "options.topk"));
  // A sparse plan's run needs the indices.
  o.topk = kTopk;
  step.plan(m.batch(), o);
  HostTensor out(cfg.dtype, {m.q.shape()[0], cfg.num_heads, cfg.v_head_dim});
  out.fill_bytes(0xAB);
  const std::vector<uint8_t> before = out.bytes();
  HostTensor c2 = m.cache;
  MlaLayer y = m.layer();
  y.kv_cache = c2.view();
  EXPECT_TRUE(throws_error([&] { step.run(y, out.view()); }, ErrorKind::kInvalidArgument, "indices"));
  HostTensor short_idx(DType::kInt32, {m.q.shape()[0], kTopk - 1});
  const TensorView sv = short_idx.view();
  y.indices = &sv;
  EXPECT_TRUE(throws_error([&] { step.run(y, out.view()); }, ErrorKind::kInvalidArgument, "indices"));
  EXPECT_EQ(out.bytes(), before);
  EXPECT_EQ(c2.bytes(), m.cache.bytes());
  // A dense plan on a config with sparse steps keeps the config's own capacities (the parts'
  // doubled ones apply to sparse plans only).
  {
    const std::vector<int32_t> q7(static_cast<size_t>(cfg.max_batch) + 1, 1), c7(q7.size(), 1);
    std::vector<int32_t> table(q7.size() * static_cast<size_t>(m.cols), 0);
    MlaBatch over;
    over.batch_size = static_cast<int>(q7.size());
    over.query_lens = q7.data();
    over.context_lens = c7.data();
    over.block_table = table.data();
    over.block_table_cols = m.cols;
    EXPECT_TRUE(throws_error([&] { step.plan(over); }, ErrorKind::kInvalidArgument, "batch_size"));
  }
  // A config with sparse steps needs the latent attention.
  MlaConfig bad = cfg;
  bad.block_size = 24;
  EXPECT_TRUE(throws_error([&] { MlaStep x(bad); }, ErrorKind::kInvalidArgument, "config.max_topk"));
}

}  // namespace
}  // namespace test
}  // namespace mlakit
