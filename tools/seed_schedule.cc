#include "seed_schedule.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "mlakit/mla.h"

namespace mlakit_bench {

std::vector<SeedStep> seed_schedule(const std::vector<int32_t>& prompt, int budget, int max_per_step) {
  if (budget <= 0) throw std::invalid_argument("seed_schedule: the budget must be positive");
  for (int32_t p : prompt)
    if (p <= 0) throw std::invalid_argument("seed_schedule: prompt lengths must be positive");
  const int requests = static_cast<int>(prompt.size());
  std::vector<int32_t> done(prompt.size(), 0);
  std::vector<SeedStep> steps;
  int first = 0;  // oldest unfinished request; the finished ones always form a prefix
  while (first < requests) {
    SeedStep s;
    int64_t left = budget;
    for (int r = first; r < requests && left > 0; ++r) {
      if (max_per_step > 0 && static_cast<int>(s.entries.size()) == max_per_step) break;
      const int32_t take = static_cast<int32_t>(std::min<int64_t>(left, prompt[r] - done[r]));
      s.entries.push_back(SeedEntry{r, done[r], take, done[r] + take == prompt[r]});
      s.tokens += take;
      s.context += done[r];
      done[r] += take;
      left -= take;
    }
    while (first < requests && done[first] == prompt[first]) ++first;
    steps.push_back(std::move(s));
  }
  return steps;
}

std::vector<SeedStep> seed_schedule(int requests, int prompt, int budget, int max_per_step) {
  if (requests < 0) throw std::invalid_argument("seed_schedule: negative request count");
  return seed_schedule(std::vector<int32_t>(static_cast<size_t>(requests), prompt), budget, max_per_step);
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

int64_t seed_workspace_rows(const std::vector<SeedStep>& steps, int budget) {
  int64_t max_ctx = 0;
  for (const SeedStep& s : steps) max_ctx = std::max(max_ctx, s.context);
  return budget + max_ctx;
}

std::string seed_schedule_json(const std::vector<SeedStep>& steps, int budget, int64_t bucket_step,
                               const MlaDims& d) {
  const int64_t cap = seed_workspace_rows(steps, budget);
  std::ostringstream o;
  o.precision(17);
  o << "{\"budget\": " << budget << ", \"workspace_rows\": " << cap << ", \"bucket_step\": " << bucket_step
    << ", \"dims\": {\"heads\": " << d.heads << ", \"latent\": " << d.latent << ", \"nope\": " << d.nope
    << ", \"rope\": " << d.rope << ", \"v\": " << d.v << "}, \"steps\": [";
  for (size_t i = 0; i < steps.size(); ++i) {
    const SeedStep& s = steps[i];
    const StepFlops f = seed_step_flops(s, d);
    o << (i ? ", " : "") << "{\"tokens\": " << s.tokens << ", \"context\": " << s.context
      << ", \"graph_rows\": " << mlakit::graph_rows_bucket(s.tokens + s.context, cap, bucket_step)
      << ", \"flops\": {\"attention\": " << f.attention << ", \"up_projection\": " << f.up_projection
      << "}, \"entries\": [";
    for (size_t j = 0; j < s.entries.size(); ++j) {
      const SeedEntry& e = s.entries[j];
      o << (j ? ", " : "") << "[" << e.request << ", " << e.context << ", " << e.new_tokens << ", "
        << (e.finishes ? "true" : "false") << "]";
    }
    o << "]}";
  }
  o << "]}";
  return o.str();
}

}  // namespace mlakit_bench
