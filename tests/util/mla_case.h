// An MLA step problem for the tests: random layer tensors, a paged latent cache whose context
// rows are random, and a block table of shuffled blocks; the float64 reference of the step and
// the cache expected after it. In any cache format (cfg.kv_cache_dtype): an FP8 cache holds
// random latents encoded as the format defines (util/kv_cache_spec.h), and its expected state
// after a step is built the same way, independently of the library's codec.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "mlakit/mla.h"
#include "util/kv_cache_spec.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {

struct MlaCase {
  MlaConfig cfg;
  std::vector<int32_t> q_lens, ctx_lens, block_table;
  std::vector<int64_t> slot_mapping;  // filled by with_slot_mapping()
  int cols = 0;
  HostTensor q, kv_c, k_pe, w, cache;  // cache: cfg.dtype, or uint8 rows of an FP8 format
  HostTensor k_scale;                    // kFp8: fp32 [1], the layer's cache scale

  int64_t total_q() const { return std::accumulate(q_lens.begin(), q_lens.end(), int64_t{0}); }
  int64_t total_ctx() const { return std::accumulate(ctx_lens.begin(), ctx_lens.end(), int64_t{0}); }
  MlaBatch batch(bool use_slot_mapping = false) const {
    MlaBatch b;
    b.batch_size = static_cast<int>(q_lens.size());
    b.query_lens = q_lens.data();
    b.context_lens = ctx_lens.data();
    b.block_table = block_table.data();
    b.block_table_cols = cols;
    b.slot_mapping = use_slot_mapping ? slot_mapping.data() : nullptr;
    return b;
  }
  // Host views of the layer tensors.
  MlaLayer layer() const {
    MlaLayer y{q.view(), kv_c.view(), k_pe.view(), w.view(), cache.view()};
    if (cfg.kv_cache_dtype == KvCacheDtype::kFp8) y.k_scale = k_scale.view();
    return y;
  }
  float k_scale_value() const { return cfg.kv_cache_dtype == KvCacheDtype::kFp8 ? static_cast<float>(k_scale.get(0)) : 1.0f; }
  int64_t cache_row_elems() const {
    return cfg.kv_cache_dtype == KvCacheDtype::kAuto
               ? cfg.kv_lora_rank + cfg.qk_rope_head_dim
               : spec::row_bytes(cfg.kv_cache_dtype, cfg.kv_lora_rank, cfg.qk_rope_head_dim);
  }
  // New token t's row in an FP8 format, encoded from kv_c / k_pe as the format defines.
  std::vector<uint8_t> encoded_row(int64_t t) const {
    const int L = cfg.kv_lora_rank, R = cfg.qk_rope_head_dim;
    std::vector<uint8_t> row(static_cast<size_t>(cache_row_elems()));
    spec::encode(cfg.kv_cache_dtype, cfg.dtype, static_cast<const uint16_t*>(kv_c.view().ptr_at(t)), L,
                 static_cast<const uint16_t*>(k_pe.view().ptr_at(t)), R, k_scale_value(), row.data());
    return row;
  }
  int64_t slot(int r, int64_t p) const {
    return static_cast<int64_t>(block_table[static_cast<size_t>(r * cols + p / cfg.block_size)]) * cfg.block_size +
           p % cfg.block_size;
  }
};

// cfg gives the dims, dtype, block size and device; capacities are raised to fit the lengths.
// `spare_blocks` unused blocks are mixed into the cache (unless cfg.num_blocks is set);
// `extra_q_rows` rows past the step's tokens are added to q / kv_c / k_pe (a token bucket).
inline MlaCase make_mla_case(MlaConfig cfg, const std::vector<int32_t>& q_lens,
                             const std::vector<int32_t>& ctx_lens, uint64_t seed, int spare_blocks = 3,
                             int extra_q_rows = 0) {
  std::mt19937_64 rng(seed);
  MlaCase m;
  m.q_lens = q_lens;
  m.ctx_lens = ctx_lens;
  const int n = static_cast<int>(q_lens.size());
  const int bs = cfg.block_size;
  int64_t blocks = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t need = (ctx_lens[r] + q_lens[r] + bs - 1) / bs;
    m.cols = std::max<int>(m.cols, static_cast<int>(need));
    blocks += need;
  }
  m.cols = std::max(m.cols, 1) + 1;  // one unused column: tables are padded in engines too
  // A given num_blocks is kept (it must cover the blocks needed), e.g. one cache for several steps.
  cfg.num_blocks = cfg.num_blocks > 0 ? cfg.num_blocks : blocks + spare_blocks;
  // Shuffled block ids: request r's blocks are scattered over the cache.
  std::vector<int32_t> ids(static_cast<size_t>(cfg.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  m.block_table.assign(static_cast<size_t>(n * m.cols), -1);
  size_t next = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t need = (ctx_lens[r] + q_lens[r] + bs - 1) / bs;
    for (int64_t i = 0; i < need; ++i) m.block_table[static_cast<size_t>(r * m.cols + i)] = ids[next++];
  }
  cfg.max_batch = std::max(cfg.max_batch, n);
  const int64_t tq = std::accumulate(q_lens.begin(), q_lens.end(), int64_t{0});
  const int64_t tc = std::accumulate(ctx_lens.begin(), ctx_lens.end(), int64_t{0});
  cfg.max_tokens = std::max<int64_t>(cfg.max_tokens, std::max<int64_t>(tq, 1));
  cfg.max_context_tokens = std::max<int64_t>(cfg.max_context_tokens, tc);
  m.cfg = cfg;

  const int64_t H = cfg.num_heads, L = cfg.kv_lora_rank, R = cfg.qk_rope_head_dim;
  const int64_t rows = tq + extra_q_rows;
  m.q = HostTensor(cfg.dtype, {rows, H, cfg.qk_nope_head_dim + R});
  m.kv_c = HostTensor(cfg.dtype, {rows, L});
  m.k_pe = HostTensor(cfg.dtype, {rows, R});
  m.w = HostTensor(cfg.dtype, {H * (cfg.qk_nope_head_dim + cfg.v_head_dim), L});
  m.q.fill_normal(rng);
  m.kv_c.fill_normal(rng);
  m.k_pe.fill_normal(rng);
  m.w.fill_normal(rng, 1.0 / std::sqrt(static_cast<double>(L)));  // K and V come out ~N(0, 1)
  if (cfg.kv_cache_dtype == KvCacheDtype::kAuto) {
    m.cache = HostTensor(cfg.dtype, {cfg.num_blocks, bs, L + R});
    m.cache.fill_normal(rng);
  } else {
    // Random latents, encoded: the cache an earlier step (or another engine) wrote.
    m.k_scale = HostTensor(DType::kFP32, {1});
    m.k_scale.set(0, 0.0173);  // not a power of two; N(0, 1) latents reach past 448 x it (saturated) rarely
    m.cache = HostTensor(DType::kUInt8, {cfg.num_blocks, bs, m.cache_row_elems()});
    HostTensor lat_c(cfg.dtype, {1, L}), lat_pe(cfg.dtype, {1, R});
    for (int64_t r = 0; r < cfg.num_blocks * bs; ++r) {
      lat_c.fill_normal(rng);
      lat_pe.fill_normal(rng);
      spec::encode(cfg.kv_cache_dtype, cfg.dtype, static_cast<const uint16_t*>(lat_c.data()), static_cast<int>(L),
                   static_cast<const uint16_t*>(lat_pe.data()), static_cast<int>(R), m.k_scale_value(),
                   static_cast<uint8_t*>(m.cache.data()) + r * m.cache_row_elems());
    }
  }
  for (int r = 0, t = 0; r < n; ++r)
    for (int j = 0; j < q_lens[r]; ++j, ++t) m.slot_mapping.push_back(m.slot(r, ctx_lens[r] + j));
  return m;
}

// The cache after the step: the new tokens' [kv_c, k_pe] at their slots (encoded in an FP8
// format), the rest unchanged.
inline HostTensor expected_cache(const MlaCase& m) {
  HostTensor c = m.cache;
  const int64_t L = m.cfg.kv_lora_rank, R = m.cfg.qk_rope_head_dim;
  if (m.cfg.kv_cache_dtype != KvCacheDtype::kAuto) {
    const int64_t w = m.cache_row_elems();
    for (size_t t = 0; t < m.slot_mapping.size(); ++t) {
      const std::vector<uint8_t> row = m.encoded_row(static_cast<int64_t>(t));
      std::memcpy(static_cast<uint8_t*>(c.data()) + m.slot_mapping[t] * w, row.data(), row.size());
    }
    return c;
  }
  for (size_t t = 0; t < m.slot_mapping.size(); ++t) {
    const int64_t s = m.slot_mapping[t];
    for (int64_t x = 0; x < L; ++x) c.set(s * (L + R) + x, m.kv_c.get(static_cast<int64_t>(t) * L + x));
    for (int64_t x = 0; x < R; ++x) c.set(s * (L + R) + L + x, m.k_pe.get(static_cast<int64_t>(t) * R + x));
  }
  return c;
}

struct MlaRef {
  HostTensor out, lse;  // fp64 [total_q, H, Dv], [total_q, H]
};

inline MlaRef mla_reference(const MlaCase& m, float sm_scale = 0.0f) {
  const int64_t tq = m.total_q();
  MlaRef r{HostTensor(DType::kFP64, {tq, m.cfg.num_heads, m.cfg.v_head_dim}),
           HostTensor(DType::kFP64, {tq, m.cfg.num_heads})};
  MlaLayer y = m.layer();
  // Only the first total_q rows belong to the step.
  y.q.shape[0] = y.kv_c.shape[0] = y.k_pe.shape[0] = tq;
  TensorView lse = r.lse.view();
  reference::mla_step(m.cfg, m.batch(), y, sm_scale, r.out.view(), &lse);
  return r;
}

struct StepResult {
  HostTensor out, lse;
  MlaPlanInfo info;
};

// Rows [0, total_q) of a step's out and lse against the wanted values (float64, the same
// layouts): every row written (outputs are poisoned with NaN before a run) and within tolerance.
// K and V are rounded to bf16 after the up-projection (the reference keeps them in double), which
// moves scores by ~1e-3: the LSE gets the same 1e-2 relative budget as the output by default.
inline void expect_step_rows(const HostTensor& out, const HostTensor& lse, const MlaCase& m,
                             const std::vector<double>& want_out, const std::vector<double>& want_lse,
                             double tol = 1e-2, double lse_tol = 1e-2) {
  const int64_t tq = m.total_q();
  std::vector<double> o = out.to_doubles(), l = lse.to_doubles();
  o.resize(static_cast<size_t>(tq * m.cfg.num_heads * m.cfg.v_head_dim));
  l.resize(static_cast<size_t>(tq * m.cfg.num_heads));
  int64_t nan = 0;
  for (double x : o) nan += std::isnan(x) ? 1 : 0;
  for (double x : l) nan += std::isnan(x) ? 1 : 0;
  EXPECT_EQ(nan, 0) << "unwritten (poisoned) or NaN rows";
  EXPECT_LE(relative_error(o, want_out), tol);
  EXPECT_LE(lse_error(l, want_lse), lse_tol);
}

inline void expect_matches(const StepResult& r, const MlaCase& m, const MlaRef& ref, double tol = 1e-2,
                           double lse_tol = 1e-2) {
  expect_step_rows(r.out, r.lse, m, ref.out.to_doubles(), ref.lse.to_doubles(), tol, lse_tol);
}

// Runs one layer of `m` through a planned `step` on `cache` (which it writes); out and lse are
// poisoned (NaN) first. A sparse step's indices (and top-k lengths) when given.
inline StepResult run_planned(const MlaStep& step, const MlaCase& m, HostTensor& cache,
                              const TensorView* indices = nullptr, const TensorView* topk_length = nullptr) {
  const MlaConfig& cfg = step.config();
  const int64_t rows = m.q.shape()[0];
  StepResult r{HostTensor(cfg.dtype, {rows, cfg.num_heads, cfg.v_head_dim}),
               HostTensor(DType::kFP32, {rows, cfg.num_heads}), step.info()};
  r.out.fill_bytes(0xFF);
  r.lse.fill_bytes(0xFF);
  MlaLayer y = m.layer();
  y.kv_cache = cache.view();
  y.indices = indices;
  y.topk_length = topk_length;
  TensorView lse = r.lse.view();
  step.run(y, r.out.view(), &lse);
  return r;
}

// Plans and runs one layer of `m` on the CPU backend (cfg.device), on a copy of its cache
// (returned through *cache_after).
inline StepResult run_step(const MlaCase& m, const MlaConfig& cfg, HostTensor* cache_after = nullptr,
                           const MlaPlanOptions& opts = {}, bool use_slot_mapping = false) {
  MlaStep step(cfg);
  step.plan(m.batch(use_slot_mapping), opts);
  HostTensor cache = m.cache;
  StepResult r = run_planned(step, m, cache);
  if (cache_after) *cache_after = cache;
  return r;
}

}  // namespace test
}  // namespace mlakit
