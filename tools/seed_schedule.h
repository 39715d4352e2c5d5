// The seed's serving workload as a chunked-prefill engine schedules it: requests of given prompt
// lengths, all arriving at once, served first come first served under a token budget per step.
// Each step takes the oldest unfinished requests in order; a request that does not fit is cut at
// the budget and continues next step, its first part then being context (already in the cache).
//
// This is the one definition of the schedule: bench/seed_schedule.py reads it from
// `mlakit-bench seed --print-schedule` (seed_schedule_json below), so the C++ and Python
// benchmarks replay the same steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mlakit_bench {

struct SeedEntry {
  int request;
  int32_t context;     // prompt tokens already processed (in the cache)
  int32_t new_tokens;  // prompt tokens processed in this step
  bool finishes;       // the request's prompt is complete after this step (first token ready)
};

struct SeedStep {
  std::vector<SeedEntry> entries;
  int64_t tokens = 0;   // new tokens
  int64_t context = 0;  // context tokens attended
};

// max_requests_per_step bounds the requests of one step (vLLM's max_num_seqs); 0 = no bound.
// Throws std::invalid_argument on a non-positive budget or prompt length.
std::vector<SeedStep> seed_schedule(const std::vector<int32_t>& prompt_lens, int budget,
                                    int max_requests_per_step = 0);
// `requests` prompts of `prompt_tokens` each.
std::vector<SeedStep> seed_schedule(int requests, int prompt_tokens, int budget,
                                    int max_requests_per_step = 0);

// The useful work of one layer of a step, in FLOP, the same for every path that computes it:
// attention counts visible (query, key) pairs (a new token at position p of its request sees
// p + 1 keys), 2 x (nope + rope + v) per pair and head; the up-projection counts the real rows
// (context + new tokens, no graph-bucket padding), 2 x latent x heads x (nope + v) each.
struct MlaDims {
  int heads = 16, latent = 512, nope = 128, rope = 64, v = 128;
};
struct StepFlops {
  double attention = 0, up_projection = 0;
  double total() const { return attention + up_projection; }
};
StepFlops seed_step_flops(const SeedStep& step, const MlaDims& dims);

// The rows of the workspace that holds every step of `steps` as one launch: the budget plus the
// largest context of a step.
int64_t seed_workspace_rows(const std::vector<SeedStep>& steps, int budget);

// The schedule as JSON: {"budget", "workspace_rows", "bucket_step", "dims": {...}, "steps": [{
// "tokens", "context", "graph_rows" (mlakit::graph_rows_bucket of the step's rows under the
// workspace rows), "flops": {"attention", "up_projection"}, "entries": [[request, context, new,
// finishes], ...]}, ...]}.
std::string seed_schedule_json(const std::vector<SeedStep>& steps, int budget, int64_t bucket_step,
                               const MlaDims& dims);

}  // namespace mlakit_bench
