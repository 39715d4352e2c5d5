// Shared by the CPU test files: a random ragged attention problem (inputs + indptr) and the
// float64 reference result for it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mlakit/mlakit.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {

struct AttnProblem {
  int heads = 0, kv_heads = 0, dqk = 0, dvo = 0;
  std::vector<int32_t> qo_indptr, kv_indptr;
  HostTensor q, k, v;
  int batch() const { return static_cast<int>(qo_indptr.size()) - 1; }
  int64_t total_q() const { return qo_indptr.back(); }
  int64_t total_kv() const { return kv_indptr.back(); }
};

// A CPU RaggedPrefill config for the problem's heads and dims, with the given capacities.
inline PrefillConfig cpu_config_for(const AttnProblem& p, DType dtype, int max_batch, int64_t max_q,
                                    int64_t max_kv) {
  PrefillConfig c;
  c.num_qo_heads = p.heads;
  c.num_kv_heads = p.kv_heads;
  c.head_dim_qk = p.dqk;
  c.head_dim_vo = p.dvo;
  c.dtype = dtype;
  c.max_batch = max_batch;
  c.max_q_tokens = max_q;
  c.max_kv_tokens = max_kv;
  c.device = Device::cpu();
  return c;
}

inline AttnProblem make_problem(DType dtype, int heads, int kv_heads, int dqk, int dvo,
                                const std::vector<int32_t>& q_lens,
                                const std::vector<int32_t>& kv_lens, std::mt19937_64& rng) {
  AttnProblem p;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.dqk = dqk;
  p.dvo = dvo;
  p.qo_indptr = make_indptr(q_lens);
  p.kv_indptr = make_indptr(kv_lens);
  p.q = HostTensor(dtype, {p.total_q(), heads, dqk});
  p.k = HostTensor(dtype, {p.total_kv(), kv_heads, dqk});
  p.v = HostTensor(dtype, {p.total_kv(), kv_heads, dvo});
  p.q.fill_normal(rng);
  p.k.fill_normal(rng);
  p.v.fill_normal(rng);
  return p;
}

// New q/k/v values with the same shapes (another "layer").
inline void refill(AttnProblem& p, std::mt19937_64& rng) {
  p.q.fill_normal(rng);
  p.k.fill_normal(rng);
  p.v.fill_normal(rng);
}

struct RefResult {
  HostTensor out;  // fp64 [total_q, H, Dvo]
  HostTensor lse;  // fp64 [total_q, H]
};

inline RefResult reference_result(const AttnProblem& p, const PrefillOptions& o) {
  RefResult r{HostTensor(DType::kFP64, {p.total_q(), p.heads, p.dvo}),
              HostTensor(DType::kFP64, {p.total_q(), p.heads})};
  TensorView lse = r.lse.view();
  reference::ragged_prefill(p.q.view(), p.k.view(), p.v.view(), p.qo_indptr.data(),
                            p.kv_indptr.data(), p.batch(), o, r.out.view(), &lse);
  return r;
}

// kv lengths paired with q lengths: lk = max(0, lq + delta), delta drawn from `deltas`, so a
// batch mixes q shorter than kv (prefix context) and q longer than kv (rows with no key under
// causal masking).
inline std::vector<int32_t> paired_kv_lengths(const std::vector<int32_t>& q_lens,
                                              std::mt19937_64& rng,
                                              const std::vector<int32_t>& deltas) {
  std::uniform_int_distribution<size_t> pick(0, deltas.size() - 1);
  std::vector<int32_t> r;
  for (int32_t lq : q_lens) r.push_back(std::max<int32_t>(0, lq + deltas[pick(rng)]));
  return r;
}

// Options in one call: causal, window_left, logits_soft_cap, sm_scale (0 = default).
inline PrefillOptions opts(bool causal, int window = -1, float cap = 0.0f, float scale = 0.0f) {
  PrefillOptions o;
  o.causal = causal;
  o.window_left = window;
  o.logits_soft_cap = cap;
  o.sm_scale = scale;
  return o;
}

}  // namespace test
}  // namespace mlakit
