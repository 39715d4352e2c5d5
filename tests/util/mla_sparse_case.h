// DeepSeek-V3.2 steps (MlaPlanOptions::topk) for the tests: the indexer's output as a test
// draws it, and a float64 oracle of the step: the dense reference for tokens below top-k, and
// for the others their named keys' latents up-projected in double and a softmax over them.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "util/kv_cache_spec.h"
#include "util/mla_case.h"

namespace mlakit {
namespace test {

struct SparseInputs {
  HostTensor indices, topk_length;  // int32 [T, K], [T]
};

// Per token: up to K entries drawn from its causal positions [0, p] (repeats allowed), with -1
// padding, an entry past its request's keys, both ends; top-k lengths cutting some rows short.
// full: every causal position once, shuffled (what top-K selects when p + 1 <= K... or always).
SparseInputs make_indices(const MlaCase& m, int kTopk, uint64_t seed, bool full = false) {
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
Oracle sparse_oracle(const MlaCase& m, int kTopk, const SparseInputs& s) {
  const MlaConfig& c = m.cfg;
  const MlaRef dense = mla_reference(m);
  Oracle o{dense.out.to_doubles(), dense.lse.to_doubles()};
  const int64_t H = c.num_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim, Dn = c.qk_nope_head_dim,
                Dv = c.v_head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dn + R));
  // FP8 caches: every named key's latent is decoded from the cache the step leaves.
  const bool fp8 = c.kv_cache_dtype != KvCacheDtype::kAuto;
  const HostTensor after = fp8 ? expected_cache(m) : HostTensor();
  std::vector<double> w(static_cast<size_t>(H * (Dn + Dv) * L));
  for (size_t i = 0; i < w.size(); ++i) w[i] = m.w.get(static_cast<int64_t>(i));
  int64_t t = 0;
  for (size_t r = 0; r < m.q_lens.size(); ++r) {
    const int64_t qo = t;
    const int32_t kv = m.ctx_lens[r] + m.q_lens[r];
    // Position pos's latent row, then per head [K_nope | V] up-projected in double and its k_pe,
    // computed once for the positions some row names.
    std::vector<std::vector<double>> proj(static_cast<size_t>(kv));
    auto row_of = [&](int32_t pos) -> const std::vector<double>& {
      std::vector<double>& p = proj[static_cast<size_t>(pos)];
      if (!p.empty()) return p;
      std::vector<double> lat(static_cast<size_t>(L + R));
      if (fp8) {  // the row as the cache holds it after the step: new tokens encoded too
        const int64_t w = m.cache_row_elems();
        lat = spec::decode(c.kv_cache_dtype, static_cast<const uint8_t*>(after.data()) + m.slot(static_cast<int>(r), pos) * w,
                           static_cast<int>(L), static_cast<int>(R), m.k_scale_value());
      }
      for (int64_t x = 0; x < L + R && !fp8; ++x) {
        if (pos < m.ctx_lens[r]) {
          lat[static_cast<size_t>(x)] = m.cache.get(m.slot(static_cast<int>(r), pos) * (L + R) + x);
        } else {
          const int64_t tok = qo + (pos - m.ctx_lens[r]);
          lat[static_cast<size_t>(x)] = x < L ? m.kv_c.get(tok * L + x) : m.k_pe.get(tok * R + (x - L));
        }
      }
      p.assign(static_cast<size_t>(H * (Dn + Dv) + R), 0.0);
      for (int64_t o2 = 0; o2 < H * (Dn + Dv); ++o2) {
        double acc = 0;
        for (int64_t x = 0; x < L; ++x) acc += lat[static_cast<size_t>(x)] * w[static_cast<size_t>(o2 * L + x)];
        p[static_cast<size_t>(o2)] = acc;
      }
      for (int64_t d = 0; d < R; ++d) p[static_cast<size_t>(H * (Dn + Dv) + d)] = lat[static_cast<size_t>(L + d)];
      return p;
    };
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
        std::vector<double> score(keys.size());
        for (size_t j = 0; j < keys.size(); ++j) {
          const std::vector<double>& pr = row_of(keys[j]);
          double sc = 0;
          for (int64_t d = 0; d < Dn; ++d) sc += m.q.get((t * H + h) * (Dn + R) + d) * pr[static_cast<size_t>(h * (Dn + Dv) + d)];
          for (int64_t d = 0; d < R; ++d) {
            sc += m.q.get((t * H + h) * (Dn + R) + Dn + d) * pr[static_cast<size_t>(H * (Dn + Dv) + d)];
          }
          score[j] = sc * scale;
        }
        double mx = -std::numeric_limits<double>::infinity();
        for (double x : score) mx = std::max(mx, x);
        double sum = 0;
        for (double& x : score) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (size_t j = 0; j < keys.size(); ++j) acc += score[j] * row_of(keys[j])[static_cast<size_t>(h * (Dn + Dv) + Dn + d)];
          o.out[static_cast<size_t>((t * H + h) * Dv + d)] = keys.empty() ? 0.0 : acc / sum;
        }
        o.lse[static_cast<size_t>(t * H + h)] = keys.empty() ? -std::numeric_limits<double>::infinity() : mx + std::log(sum);
      }
    }
  }
  return o;
}

}  // namespace test
}  // namespace mlakit
