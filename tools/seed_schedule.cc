#include "seed_schedule.h"

#include <algorithm>
#include <stdexcept>

namespace mlakit_bench {

std::vector<SeedStep> seed_schedule(int requests, int prompt, int budget, int max_per_step) {
  if (requests < 0 || prompt <= 0 || budget <= 0) throw std::invalid_argument("seed_schedule: bad sizes");
  std::vector<int32_t> done(static_cast<size_t>(requests), 0);
  std::vector<SeedStep> steps;
  int first = 0;  // oldest unfinished request
  while (first < requests) {
    SeedStep s;
    int64_t left = budget;
    for (int r = first; r < requests && left > 0; ++r) {
      if (max_per_step > 0 && static_cast<int>(s.entries.size()) == max_per_step) break;
      const int32_t take = static_cast<int32_t>(std::min<int64_t>(left, prompt - done[r]));
      s.entries.push_back(SeedEntry{r, done[r], take, done[r] + take == prompt});
      s.tokens += take;
      s.context += done[r];
      done[r] += take;
      left -= take;
    }
    while (first < requests && done[first] == prompt) ++first;
    steps.push_back(std::move(s));
  }
  return steps;
}

StepFlops seed_step_flops(const SeedStep& step, const MlaDims& d) {
  int64_t pairs = 0, rows = 0;
  for (const SeedEntry& e : step.entries) {
    const int64_t n = e.new_tokens;
    pairs += n * e.context + n * (n + 1) / 2;
    rows += e.context + n;
  }
  StepFlops f;
  f.attention = 2.0 * static_cast<double>(pairs) * d.heads * (d.nope + d.rope + d.v);
  f.up_projection = 2.0 * static_cast<double>(rows) * d.latent * d.heads * (d.nope + d.v);
  return f;
}

int64_t graph_bucket(int64_t rows, int64_t cap, int64_t step_above) {
  if (rows < 0 || rows > cap) throw std::invalid_argument("graph_bucket: step rows exceed the graph cap");
  if (step_above < 1) throw std::invalid_argument("graph_bucket: step_above must be positive");
  const int64_t unit = rows <= kGraphBucketFineUntil ? kGraphBucketFine : step_above;
  const int64_t up = std::max<int64_t>(unit, (rows + unit - 1) / unit * unit);
  return std::min(cap, up);
}

}  // namespace mlakit_bench
