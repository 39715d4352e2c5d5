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

// The useful work of one layer of a step, in FLOP, the same for every path that computes it:
// attention counts visible (query, key) pairs (a new token at position p of its request sees
// p + 1 keys), 2 x (nope + rope + v) per pair and head; the up-projection counts the real rows
// (context + new tokens, no graph-bucket padding), 2 x latent x heads x (nope + v) each.
// bench/seed_schedule.py (step_flops) counts the same, so both tools report one rate.
struct MlaDims {
  int heads = 16, latent = 512, nope = 128, rope = 64, v = 128;
};
struct StepFlops {
  double attention = 0, up_projection = 0;
  double total() const { return attention + up_projection; }
};
StepFlops seed_step_flops(const SeedStep& step, const MlaDims& dims);

// CUDA-graph buckets. A graph-replayed MlaStep (MlaPlanOptions::graph_rows = G) sizes its gather
// and up-projection launches for G rows on the host, so one captured graph serves every step with
// context + new tokens <= G, and a G far above the step's rows wastes up-projection work (N = 1 at
// budget 8192 planned with G = budget + context took 2.63 ms per step on the H200, eager 1.31).
// Engines capture one graph per bucket of token counts (vLLM: 1, 2, 4, multiples of 8 to 256,
// then of 16 to 512, for decode). Prefill steps are large, so these buckets are coarser:
// multiples of 256 rows, up to 1024 and then of `step_above` (256 by default), never above `cap`
// (the workspace rows, budget + largest context, where every step fits as one launch). The
// padding is up-projection and gather work on rows nothing reads (the attention runs the plan's
// lengths): at N = 100, 1.2% of the rows at budget 8192 and 4.5% at 2048 with 256-row steps, which
// take 6 and 5 graphs; with 1024-row steps 4.5% and 20% in 3 and 2 graphs, and the
// graph-replayed step measured 1.0% and 2.9% slower (C++, docs/performance.md).
// bench/seed_schedule.py (graph_bucket) has the same rule, so bench/compare_mla.py replays alike.
// Throws std::invalid_argument when rows > cap or step_above < 1.
constexpr int64_t kGraphBucketFine = 256, kGraphBucketFineUntil = 1024, kGraphBucketStepAbove = 256;
int64_t graph_bucket(int64_t rows, int64_t cap, int64_t step_above = kGraphBucketStepAbove);

}  // namespace mlakit_bench
