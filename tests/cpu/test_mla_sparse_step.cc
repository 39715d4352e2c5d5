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

struct SparseInputs {
  HostTensor indices, topk_length;  // int32 [T, K], [T]
};

// Per token: up to K entries drawn from its causal positions [0, p] (repeats allowed), with -1
// padding, an entry past its request's keys, both ends; top-k lengths cutting some rows short.
// full: every causal position once, shuffled (what top-K selects when p + 1 <= K... or always).
SparseInputs make_indices(const MlaCase& m, uint64_t seed, bool full = false) {
  std::mt19937_64 rng(seed);
  const int64_t T = m.q.shape()[0];
  SparseInputs s{HostTensor(DType::kInt32, {T, kTopk}), HostTensor(DType::kInt32, {T})};
  for (int64_t i = 0; i < T * kTopk; ++i) s.indices.set(i, -1);
  for (int64_t t = 0; t < T; ++t) s.topk_length.set(t, kTopk);
  int64_t t = 0;
  for (size_t r = 0; r < m.q_lens.size(); ++r) {
    const int32_t kv = m.ctx_lens[r] + m.q_lens[r];
    for (int32_t i = 0; i < m.q_lens[r]; ++i, ++t) {
      const int32_t p = m.ctx_lens[r] + i;
      std::vector<int32_t> row;
      if (full) {
        for (int32_t k = 0; k <= p && k < kTopk; ++k) row.push_back(k);
        std::shuffle(row.begin(), row.end(), rng);
      } else {
        row = {0, p};
        const int n = static_cast<int>(rng() % (kTopk - 4));
        for (int k = 0; k < n; ++k) row.push_back(static_cast<int32_t>(rng() % (p + 1)));
        if (rng() % 3 == 0) row.push_back(kv);  // past the request's keys: skipped
        std::shuffle(row.begin(), row.end(), rng);
        if (rng() % 4 == 0) s.topk_length.set(t, static_cast<double>(row.size() > 3 ? row.size() - 2 : row.size()));
      }
      for (size_t k = 0; k < row.size() && k < static_cast<size_t>(kTopk); ++k) s.indices.set(t * kTopk + k, row[k]);
    }
  }
  return s;
}

struct Oracle {
  std::vector<double> out, lse;  // [T, H, Dv], [T, H]
};

// The dense reference for every token, then the sparse tokens (position >= K) redone over their
// named keys in float64.
Oracle oracle(const MlaCase& m, const SparseInputs& s) {
  const MlaConfig& c = m.cfg;
  const MlaRef dense = mla_reference(m);
  Oracle o{dense.out.to_doubles(), dense.lse.to_doubles()};
  const int64_t H = c.num_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim, Dn = c.qk_nope_head_dim,
                Dv = c.v_head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dn + R));
  auto latent = [&](size_t r, int64_t qo, int32_t pos, int64_t x) {  // value x of position pos's row
    if (pos < m.ctx_lens[r]) return m.cache.get(m.slot(static_cast<int>(r), pos) * (L + R) + x);
    const int64_t tok = qo + (pos - m.ctx_lens[r]);
    return x < L ? m.kv_c.get(tok * L + x) : m.k_pe.get(tok * R + (x - L));
  };
  int64_t t = 0;
  for (size_t r = 0; r < m.q_lens.size(); ++r) {
    const int64_t qo = t;
    const int32_t kv = m.ctx_lens[r] + m.q_lens[r];
    for (int32_t i = 0; i < m.q_lens[r]; ++i, ++t) {
      const int32_t p = m.ctx_lens[r] + i;
      if (p < kTopk) continue;
      std::vector<int32_t> keys;
      const int64_t len = static_cast<int64_t>(s.topk_length.get(t));
      for (int64_t k = 0; k < std::min<int64_t>(len, kTopk); ++k) {
        const int32_t e = static_cast<int32_t>(s.indices.get(t * kTopk + k));
        if (e >= 0 && e < kv) keys.push_back(e);
      }
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> score(keys.size()), v(keys.size() * static_cast<size_t>(Dv), 0.0);
        for (size_t j = 0; j < keys.size(); ++j) {
          std::vector<double> lat(static_cast<size_t>(L + R));
          for (int64_t x = 0; x < L + R; ++x) lat[static_cast<size_t>(x)] = latent(r, qo, keys[j], x);
          double sc = 0;
          for (int64_t d = 0; d < Dn; ++d) {
            double k = 0;
            for (int64_t x = 0; x < L; ++x) k += lat[static_cast<size_t>(x)] * m.w.get((h * (Dn + Dv) + d) * L + x);
            sc += m.q.get((t * H + h) * (Dn + R) + d) * k;
          }
          for (int64_t d = 0; d < R; ++d) sc += m.q.get((t * H + h) * (Dn + R) + Dn + d) * lat[static_cast<size_t>(L + d)];
          score[j] = sc * scale;
          for (int64_t d = 0; d < Dv; ++d) {
            double val = 0;
            for (int64_t x = 0; x < L; ++x) val += lat[static_cast<size_t>(x)] * m.w.get((h * (Dn + Dv) + Dn + d) * L + x);
            v[j * static_cast<size_t>(Dv) + static_cast<size_t>(d)] = val;
          }
        }
        double mx = -std::numeric_limits<double>::infinity();
        for (double x : score) mx = std::max(mx, x);
        double sum = 0;
        for (double& x : score) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (size_t j = 0; j < keys.size(); ++j) acc += score[j] * v[j * static_cast<size_t>(Dv) + static_cast<size_t>(d)];
          o.out[static_cast<size_t>((t * H + h) * Dv + d)] = keys.empty() ? 0.0 : acc / sum;
        }
        o.lse[static_cast<size_t>(t * H + h)] = keys.empty() ? -std::numeric_limits<double>::infinity() : mx + std::log(sum);
      }
    }
  }
  return o;
}

StepResult run_sparse(const MlaStep& step, const MlaCase& m, const SparseInputs& s, HostTensor& cache) {
  const MlaConfig& cfg = step.config();
  const int64_t rows = m.q.shape()[0];
  StepResult r{HostTensor(cfg.dtype, {rows, cfg.num_heads, cfg.v_head_dim}),
               HostTensor(DType::kFP32, {rows, cfg.num_heads}), step.info()};
  r.out.fill_bytes(0xFF);
  r.lse.fill_bytes(0xFF);
  MlaLayer y = m.layer();
  y.kv_cache = cache.view();
  const TensorView idx = s.indices.view(), len = s.topk_length.view();
  y.indices = &idx;
  y.topk_length = &len;
  TensorView lse = r.lse.view();
  step.run(y, r.out.view(), &lse);
  return r;
}

void expect_matches(const StepResult& r, const MlaCase& m, const Oracle& o) {
  const int64_t tq = m.total_q();
  std::vector<double> out = r.out.to_doubles(), lse = r.lse.to_doubles();
  out.resize(static_cast<size_t>(tq * m.cfg.num_heads * m.cfg.v_head_dim));
  lse.resize(static_cast<size_t>(tq * m.cfg.num_heads));
  for (double x : out) ASSERT_FALSE(std::isnan(x));
  EXPECT_LE(relative_error(out, o.out), 1e-2);
  EXPECT_LE(lse_error(lse, o.lse), 1e-2);
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
    const SparseInputs s = make_indices(m, 5);
    MlaStep step(m.cfg);
    MlaPlanOptions o;
    o.topk = kTopk;
    step.plan(m.batch(), o);
    EXPECT_EQ(step.info().sparse_tokens, 24 + 1 + 3 + 4);
    EXPECT_EQ(step.info().absorbed_tokens, 32);  // the sparse tokens only: dense ones up-project
    EXPECT_EQ(step.info().chunked, workspace_rows > 0);
    HostTensor cache = m.cache;
    const StepResult r = run_sparse(step, m, s, cache);
    expect_matches(r, m, oracle(m, s));
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
  const SparseInputs s = make_indices(m, 9, /*full=*/true);
  HostTensor cache = m.cache;
  expect_matches(run_sparse(step, m, s, cache), m, oracle(m, s));
  o.topk = 12;  // now 12..15 are sparse, their rows naming 0..11 only: not the dense result
  MlaCase m12 = m;
  step.plan(m12.batch(), o);
  EXPECT_EQ(step.info().sparse_tokens, 3 + 4);
}

TEST(CpuMlaSparseStep, GraphSizesAndRefusals) {
  const MlaCase m = make_mla_case(dims(), kQ, kCtx, 33, 3, /*extra_q_rows=*/3);
  const SparseInputs s = make_indices(m, 6);
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
  expect_matches(run_sparse(step, m, s, cache), m, oracle(m, s));
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
  // A config with sparse steps needs the latent attention.
  MlaConfig bad = cfg;
  bad.block_size = 24;
  EXPECT_TRUE(throws_error([&] { MlaStep x(bad); }, ErrorKind::kInvalidArgument, "config.max_topk"));
}

}  // namespace
}  // namespace test
}  // namespace mlakit
