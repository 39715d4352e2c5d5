// A prefill spread over several engine steps (chunked prefill), for tests of the cache a step
// leaves behind: request r starts with start_ctx[r] tokens in the cache, then step s brings
// steps[s][r] new tokens, which later steps attend as context. All steps share one block table
// (sized for the final lengths, shuffled), one weight and one cache. Case s carries its own
// q / kv_c / k_pe with max(its tokens + extra_q_rows, bucket_rows) rows (the rows past its
// tokens are a token bucket's padding) and, as its cache, the cache as it must be before step s:
// run the steps on one cache, never reset, and compare it with expected_cache(cases[s]) after
// step s; a step that failed to write a new token fails the next step's attention and this
// comparison.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "util/mla_case.h"

namespace mlakit {
namespace test {

// The largest step of a prefill over `steps` (new tokens per request per step) from start_ctx:
// its new tokens (at least 1), its context, its context + new rows; and the requests' final lengths.
struct StepsExtent {
  int64_t max_new = 1, max_context = 0, max_rows = 0;
  std::vector<int32_t> final_len;
};
inline StepsExtent prefill_steps_extent(const std::vector<int32_t>& start_ctx,
                                        const std::vector<std::vector<int32_t>>& steps) {
  StepsExtent e;
  e.final_len = start_ctx;
  for (const auto& q : steps) {
    int64_t step_q = 0, step_ctx = 0;
    for (size_t r = 0; r < start_ctx.size(); ++r) {
      step_q += q[r];
      step_ctx += e.final_len[r];
      e.final_len[r] += q[r];
    }
    e.max_new = std::max(e.max_new, step_q);
    e.max_context = std::max(e.max_context, step_ctx);
    e.max_rows = std::max(e.max_rows, step_q + step_ctx);
  }
  return e;
}

inline std::vector<MlaCase> make_prefill_steps(MlaConfig cfg, const std::vector<int32_t>& start_ctx,
                                               const std::vector<std::vector<int32_t>>& steps, uint64_t seed,
                                               int extra_q_rows = 0, int64_t bucket_rows = 0) {
  const size_t n = start_ctx.size();
  const StepsExtent extent = prefill_steps_extent(start_ctx, steps);
  const std::vector<int32_t>& final_len = extent.final_len;
  std::vector<int32_t> ctx = start_ctx;
  const int64_t max_q = extent.max_new, max_ctx = extent.max_context;
  // The block table, weight and starting cache of the final lengths; capacities for one step.
  const std::vector<int32_t> none(n, 0);
  MlaCase base = make_mla_case(cfg, final_len, none, seed);
  base.cfg.max_tokens = std::max<int64_t>(cfg.max_tokens, max_q);
  base.cfg.max_context_tokens = std::max<int64_t>(cfg.max_context_tokens, max_ctx);

  std::mt19937_64 rng(seed ^ 0x5eedULL);
  const MlaConfig& c = base.cfg;
  std::vector<MlaCase> cases;
  for (size_t s = 0; s < steps.size(); ++s) {
    MlaCase m = base;
    m.q_lens = steps[s];
    m.ctx_lens = ctx;
    const int64_t rows = std::max<int64_t>(m.total_q() + extra_q_rows, bucket_rows);
    m.q = HostTensor(c.dtype, {rows, c.num_heads, c.qk_nope_head_dim + c.qk_rope_head_dim});
    m.kv_c = HostTensor(c.dtype, {rows, c.kv_lora_rank});
    m.k_pe = HostTensor(c.dtype, {rows, c.qk_rope_head_dim});
    m.q.fill_normal(rng);
    m.kv_c.fill_normal(rng);
    m.k_pe.fill_normal(rng);
    m.slot_mapping.clear();
    for (size_t r = 0; r < n; ++r)
      for (int32_t j = 0; j < steps[s][r]; ++j) m.slot_mapping.push_back(m.slot(static_cast<int>(r), ctx[r] + j));
    if (s > 0) m.cache = expected_cache(cases.back());
    for (size_t r = 0; r < n; ++r) ctx[r] += steps[s][r];
    cases.push_back(std::move(m));
  }
  return cases;
}

// kFp8 steps of make_prefill_steps with scales[s] as step s's layer scale: each step's starting
// cache is the previous step's, written with that step's scale. (An engine that changed a
// layer's scale would reinterpret the codes already cached; here it shows that the step reads the
// scale when it runs, eagerly or replayed from a graph.)
inline void set_scale_per_step(std::vector<MlaCase>& cases, const std::vector<double>& scales) {
  for (size_t s = 0; s < cases.size(); ++s) {
    cases[s].k_scale.set(0, scales[s % scales.size()]);
    if (s > 0) cases[s].cache = expected_cache(cases[s - 1]);
  }
}

}  // namespace test
}  // namespace mlakit
