// A latent attention problem for the tests: random q (one tensor or q_nope + q_pe), a paged
// latent cache filled with random rows, a block table of shuffled blocks, sparse index rows of
// every kind an engine hands over (valid positions or slots, -1 padding, repeats, the cache's
// first and last keys, values past the bound), and the float64 reference of it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "mlakit/latent.h"
#include "mlakit/runtime.h"
#include "util/kv_cache_spec.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {

struct LatentCase {
  LatentConfig cfg;
  LatentPlanOptions opts;
  std::vector<int32_t> q_lens, kv_lens, block_table;
  int cols = 0;
  bool split_q = false;  // q_nope + q_pe instead of one q
  HostTensor q, q_pe, cache;
  HostTensor indices, topk_length, sink;  // sparse / optional
  HostTensor k_scale;                      // kv_cache_dtype kFp8: the layer's scale [1]
  bool use_topk_length = false, use_sink = false;

  int64_t total_q() const { return std::accumulate(q_lens.begin(), q_lens.end(), int64_t{0}); }
  LatentBatch batch() const {
    LatentBatch b;
    b.batch_size = static_cast<int>(q_lens.size());
    b.query_lens = q_lens.data();
    b.kv_lens = kv_lens.data();
    b.block_table = block_table.data();
    b.block_table_cols = cols;
    return b;
  }
  // Host views of the inputs; the optional ones point into this case (or `keep`, 5 views).
  LatentLayer layer(TensorView* keep) const {
    LatentLayer y;
    y.q = q.view();
    y.kv_cache = cache.view();
    int k = 0;
    if (split_q) {
      keep[k] = q_pe.view();
      y.q_pe = &keep[k++];
    }
    if (opts.topk > 0) {
      keep[k] = indices.view();
      y.indices = &keep[k++];
      if (use_topk_length) {
        keep[k] = topk_length.view();
        y.topk_length = &keep[k++];
      }
    }
    if (use_sink) {
      keep[k] = sink.view();
      y.attn_sink = &keep[k++];
    }
    if (cfg.kv_cache_dtype == KvCacheDtype::kFp8) {
      keep[k] = k_scale.view();
      y.k_scale = &keep[k++];
    }
    return y;
  }
  int64_t slot(int r, int64_t p) const {
    return static_cast<int64_t>(block_table[static_cast<size_t>(r * cols + p / cfg.block_size)]) * cfg.block_size +
           p % cfg.block_size;
  }
};

// An fp8_ds_mla cache of `rows` 656-byte rows [rows, 656] (uint8): every code but NaN at random
// (all magnitudes, both signs, subnormals), per 128 codes a power-of-two scale as FlashMLA's
// quantizer writes them (with `any_scales`, a quarter of them any float, as vLLM's writer stores
// amax / 448: code x scale is then rounded to bf16 before the products, which the float64
// reference does not do), and normal bf16 rope values. Values of about a normal latent's size.
inline void fill_ds_mla_cache(HostTensor& cache, int64_t rows, std::mt19937_64& rng, bool any_scales = false) {
  cache = HostTensor(DType::kUInt8, {rows, 656});
  auto* b = static_cast<uint8_t*>(cache.data());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = b + r * 656;
    for (int i = 0; i < 512; ++i) {
      uint8_t c = static_cast<uint8_t>(rng() & 0xff);
      if ((c & 0x7f) == 0x7f) c ^= 1;  // not NaN
      row[i] = c;
    }
    for (int t = 0; t < 4; ++t) {
      float s = std::ldexp(1.0f, -9 + static_cast<int>(rng() % 3));
      if (any_scales && rng() % 4 == 0) s *= 1.0f + 0.37f * static_cast<float>(rng() % 1000) / 1000.0f;
      std::memcpy(row + 512 + 4 * t, &s, 4);
    }
    for (int i = 0; i < 64; ++i) {
      const uint16_t h = float_to_bf16(normal(rng));
      std::memcpy(row + 528 + 2 * i, &h, 2);
    }
  }
}

// Every byte of `codes` an e4m3 code at random but NaN (all magnitudes, both signs, subnormals).
inline void fill_fp8_codes(HostTensor& codes, std::mt19937_64& rng) {
  auto* b = static_cast<uint8_t*>(codes.data());
  for (size_t i = 0; i < codes.nbytes(); ++i) {
    uint8_t c = static_cast<uint8_t>(rng() & 0xff);
    if ((c & 0x7f) == 0x7f) c ^= 1;
    b[i] = c;
  }
}

// [rows, 656] bytes as the paged cache [num_blocks, block_size, 656].
inline HostTensor reshape_ds_mla(const HostTensor& flat, int64_t num_blocks, int block_size) {
  HostTensor t(DType::kUInt8, {num_blocks, block_size, 656});
  std::memcpy(t.data(), flat.data(), t.nbytes());
  return t;
}

// The bf16 cache [blocks, block_size, 576] an fp8_ds_mla cache decodes to, from the format's
// definition (util/kv_cache_spec.h's e4m3 values): code x scale in float32, rounded once to bf16,
// what the MLA step's gather hands its up-projection; the rope part as it is.
// The bf16 cache [blocks, block_size, L + R] an FP8 cache of `format` decodes to, from the
// formats' definitions (util/kv_cache_spec.h's decode16: code x scale in float32, rounded once to
// bf16, what the MLA step's gather hands its up-projection), with the layer scale `k_scale` (fp8).
inline HostTensor decoded_bf16_cache(const HostTensor& fp8, KvCacheDtype format, int latent, int rope,
                                     float k_scale = 0.0f) {
  const int64_t blocks = fp8.shape()[0], bs = fp8.shape()[1], row_bytes = fp8.shape()[2], width = latent + rope;
  HostTensor out(DType::kBF16, {blocks, bs, width});
  const auto* src = static_cast<const uint8_t*>(fp8.data());
  auto* dst = static_cast<uint16_t*>(out.data());
  for (int64_t r = 0; r < blocks * bs; ++r) {
    const std::vector<uint16_t> v = spec::decode16(format, DType::kBF16, src + r * row_bytes, latent, rope, k_scale);
    std::memcpy(dst + r * width, v.data(), sizeof(uint16_t) * static_cast<size_t>(width));
  }
  return out;
}

// cfg gives heads, dims, dtype, block size and kv_split_size; capacities are raised to fit.
// An fp8_ds_mla cfg.kv_cache_dtype gets a cache of that format (fill_ds_mla_cache).
// `extra_rows`: q rows past the plan's tokens (a capacity-sized buffer).
inline LatentCase make_latent_case(LatentConfig cfg, const std::vector<int32_t>& q_lens,
                                   const std::vector<int32_t>& kv_lens, uint64_t seed, bool split_q = false,
                                   int extra_rows = 0, int spare_blocks = 3) {
  std::mt19937_64 rng(seed);
  LatentCase m;
  m.q_lens = q_lens;
  m.kv_lens = kv_lens;
  m.split_q = split_q;
  const int n = static_cast<int>(q_lens.size());
  const int bs = cfg.block_size;
  int64_t blocks = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t need = (kv_lens[r] + bs - 1) / bs;
    m.cols = std::max<int>(m.cols, static_cast<int>(need));
    blocks += need;
  }
  m.cols = std::max(m.cols, 1) + 1;  // an unused column, as engines pad their tables
  cfg.num_blocks = cfg.num_blocks > 0 ? cfg.num_blocks : blocks + spare_blocks;
  std::vector<int32_t> ids(static_cast<size_t>(cfg.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  m.block_table.assign(static_cast<size_t>(n * m.cols), -1);
  size_t next = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t need = (kv_lens[r] + bs - 1) / bs;
    for (int64_t i = 0; i < need; ++i) m.block_table[static_cast<size_t>(r * m.cols + i)] = ids[next++];
  }
  const int64_t tq = std::accumulate(q_lens.begin(), q_lens.end(), int64_t{0});
  const int64_t tk = std::accumulate(kv_lens.begin(), kv_lens.end(), int64_t{0});
  cfg.max_batch = std::max(cfg.max_batch, std::max(n, 1));
  cfg.max_q_tokens = std::max<int64_t>(cfg.max_q_tokens, std::max<int64_t>(tq, 1));
  cfg.max_kv_tokens = std::max<int64_t>(cfg.max_kv_tokens, tk);
  m.cfg = cfg;
  const int64_t H = cfg.num_heads, L = cfg.kv_lora_rank, R = cfg.qk_rope_head_dim, rows = tq + extra_rows;
  m.q = HostTensor(cfg.dtype, {rows, H, split_q ? L : L + R});
  m.q.fill_normal(rng);
  if (split_q) {
    m.q_pe = HostTensor(cfg.dtype, {rows, H, R});
    m.q_pe.fill_normal(rng);
  }
  if (cfg.kv_cache_dtype == KvCacheDtype::kFp8DsMla) {
    fill_ds_mla_cache(m.cache, cfg.num_blocks * bs, rng);
    m.cache = reshape_ds_mla(m.cache, cfg.num_blocks, bs);
  } else if (cfg.kv_cache_dtype == KvCacheDtype::kFp8) {
    m.cache = HostTensor(DType::kUInt8, {cfg.num_blocks, bs, L + R});
    fill_fp8_codes(m.cache, rng);
    m.k_scale = HostTensor(DType::kFP32, {1});
    // A power of two: the decoded values are then exact in bf16, as the float64 reference takes
    // them (other scales are rounded once; the tests that compare bits use them).
    m.k_scale.set(0, 0.0078125);
  } else {
    m.cache = HostTensor(cfg.dtype, {cfg.num_blocks, bs, L + R});
    m.cache.fill_normal(rng);
  }
  m.sink = HostTensor(DType::kFP32, {H});
  m.sink.fill_normal(rng, 2.0);
  return m;
}

// Sparse index rows [rows, topk] for every token: valid keys at random, the request's (or the
// cache's) first and last key, a repeated entry, -1 padding at the tail, and entries past the
// bound (-2, kv_len or num_slots, a large value) that must be skipped. topk_length [rows]: the
// row's length in [0, topk] (some full, some 0).
inline void add_sparse(LatentCase& m, int topk, LatentIndices kind, uint64_t seed, bool with_topk_length) {
  std::mt19937_64 rng(seed);
  m.opts.topk = topk;
  m.opts.indices = kind;
  m.cfg.max_topk = std::max(m.cfg.max_topk, topk);
  m.use_topk_length = with_topk_length;
  const int64_t rows = m.q.shape()[0];
  const int64_t slots = m.cfg.num_blocks * m.cfg.block_size;
  m.indices = HostTensor(DType::kInt32, {rows, topk});
  m.topk_length = HostTensor(DType::kInt32, {rows});
  int64_t t = 0;
  for (size_t r = 0; r <= m.q_lens.size(); ++r) {
    const int64_t nq = r < m.q_lens.size() ? m.q_lens[r] : rows - t;  // the extra rows: request-less
    const int64_t kv = r < m.q_lens.size() ? m.kv_lens[r] : 0;
    for (int64_t i = 0; i < nq; ++i, ++t) {
      const int64_t bound = kind == LatentIndices::kPositions ? kv : slots;
      std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(bound - 1, 0));
      const int pad = static_cast<int>(rng() % (topk / 4 + 1));  // the -1 tail
      for (int e = 0; e < topk; ++e) {
        int64_t x = bound > 0 ? pick(rng) : -1;
        if (e == 0 && bound > 0) x = 0;
        if (e == 1 && bound > 0) x = bound - 1;
        if (e == 2 && topk > 4) x = m.indices.get(t * topk);  // a repeat of entry 0
        if (e == 3 && topk > 8) x = bound;                      // just past the bound
        if (e == 5 && topk > 8) x = -2;
        if (e == 6 && topk > 8) x = 1 << 30;
        if (e >= topk - pad) x = -1;
        m.indices.set(t * topk + e, static_cast<double>(x));
      }
      const int64_t len = (t % 5 == 0) ? topk : (t % 7 == 3) ? 0 : static_cast<int64_t>(rng() % (topk + 1));
      m.topk_length.set(t, static_cast<double>(len));
    }
  }
}

struct LatentRef {
  HostTensor out, lse, max;  // fp64 [T, H, L], [T, H], [T, H]
};

inline LatentRef latent_reference(const LatentCase& m) {
  const int64_t T = m.total_q(), H = m.cfg.num_heads;
  LatentRef r{HostTensor(DType::kFP64, {T, H, m.cfg.kv_lora_rank}), HostTensor(DType::kFP64, {T, H}),
              HostTensor(DType::kFP64, {T, H})};
  TensorView keep[5];
  LatentLayer y = m.layer(keep);
  TensorView mx = r.max.view(), lse = r.lse.view();
  y.max_logits = &mx;
  reference::latent_attention(m.cfg, m.batch(), m.opts, y, r.out.view(), &lse);
  return r;
}

struct LatentResult {
  HostTensor out, lse, max;  // T' = q rows: out [T', H, L] (dtype), lse, max [T', H] fp32
  LatentPlanInfo info;
};

// Plans and runs `m` on a fresh object (or `attn`), outputs poisoned (all bits set: NaN) first.
// `lse_ht`: the lse and max_logits buffers are [H, T'] memory read through transposed views.
// `batch`: planned instead of m.batch().
inline LatentResult run_latent(const LatentCase& m, LatentAttention* attn = nullptr, bool lse_ht = false,
                               const LatentBatch* batch = nullptr) {
  std::unique_ptr<LatentAttention> own;
  if (attn == nullptr) {
    own = std::make_unique<LatentAttention>(m.cfg);
    attn = own.get();
  }
  attn->plan(batch ? *batch : m.batch(), m.opts);
  const int64_t rows = m.q.shape()[0], H = m.cfg.num_heads;
  LatentResult r{HostTensor(m.cfg.dtype, {rows, H, m.cfg.kv_lora_rank}), HostTensor(DType::kFP32, {rows, H}),
                 HostTensor(DType::kFP32, {rows, H}), attn->info()};
  r.out.fill_bytes(0xFF);
  r.lse.fill_bytes(0xFF);
  r.max.fill_bytes(0xFF);
  TensorView keep[5];
  LatentLayer y = m.layer(keep);
  TensorView lse = lse_ht ? TensorView(r.lse.data(), DType::kFP32, {rows, H}, {1, rows}) : r.lse.view();
  TensorView mx = lse_ht ? TensorView(r.max.data(), DType::kFP32, {rows, H}, {1, rows}) : r.max.view();
  y.max_logits = &mx;
  attn->run(y, r.out.view(), &lse);
  return r;
}

// lse / max_logits of [T', H] buffers (with `ht`: [H, T'] memory) as [T, H] doubles.
inline std::vector<double> rows_th(const HostTensor& t, int64_t T, int64_t H, bool ht) {
  std::vector<double> v(static_cast<size_t>(T * H));
  const int64_t rows = t.shape()[0];
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < H; ++h) v[static_cast<size_t>(i * H + h)] = ht ? t.get(h * rows + i) : t.get(i * H + h);
  return v;
}

}  // namespace test
}  // namespace mlakit
