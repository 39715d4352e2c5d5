// The seed's serving workload as a chunked-prefill engine schedules it: N requests of P prompt
// tokens, all arriving at once, served first come first served under a token budget per step.
// Each step takes the oldest unfinished requests in order; a request that does not fit is cut at
// the budget and continues next step, its first part then being context (already in the cache).
#pragma once

#include <cstdint>
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
std::vector<SeedStep> seed_schedule(int requests, int prompt_tokens, int budget,
                                    int max_requests_per_step = 0);

}  // namespace mlakit_bench
