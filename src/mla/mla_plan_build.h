// Building an MLA step's plan block in host staging: the cache slots of the new tokens, the
// gather map of every launch (per latent row: a context row's cache slot or a new token's index,
// gather_entry.h), the rows of each launch, and one attention schedule per launch. Host-only,
// allocation-free after construction, linear in the step's rows.
//
// The cache write is fused into the first launch's gather, whose map holds every new token
// exactly once (one launch: [context; new] per request; chunked: the new tokens alone); later
// launches (context chunks) only read the cache, in stream order after that write. Assumed of
// the batch, as a paged-cache allocator guarantees (a slot is written once, by the token that
// owns it; shared prefix blocks hold context only): the new tokens' slots are distinct and none
// is a context slot of any request of the step. From the block table this holds within a request
// unless its row repeats a block id (new positions follow the context positions); an explicit
// slot_mapping and blocks shared across requests are the caller's to keep. A batch that breaks
// it has a slot read and written by the same kernel: undefined context rows (the former separate
// write kernel ran first, and such a step read the new rows as context, just as wrong).
#pragma once

#include <cstdint>
#include <vector>

#include "mla/mla_checks.h"
#include "contract/prefill_launch.h"
#include "mla/mla_layout.h"
#include "mlakit/mla.h"
#include "plan/scheduler.h"

namespace mlakit {
namespace mla {

// What run() needs on the host for one launch (gather + up-projection + attention).
struct LaunchPlan {
  int64_t gather_begin = 0;  // first entry of its gather map
  int64_t rows = 0;          // rows its gather covers (>= the rows it uses)
  int64_t gemm_rows = 0;     // rows its up-projection covers: `rows`, less the absorbed tail when eager
  bool causal = false;
  bool new_tokens = false;   // its map holds the step's new tokens: its gather writes the cache
};

struct StepPlan {
  BatchTotals totals;
  std::vector<LaunchPlan> launches;  // [0]: fused or new tokens; then context chunks
  int64_t visible_pairs = 0;
  bool graph = false;        // options.graph_rows > 0: every launch sized for any step
  bool up_requests = false;  // some request with new tokens up-projects
  size_t used_bytes = 0;  // prefix of the plan block to publish
};

class PlanBuilder {
 public:
  // `kernel`: the attention kernel the plan is for (its tile and the schedule kind it reads).
  PlanBuilder(const MlaConfig& config, const MlaLayout& layout, const cuda::KernelChoice& kernel);

  // Writes the plan block for a validated batch into `block` (layout.plan_bytes) and fills `out`.
  // absorbed[r] != 0 (check_batch's choice; null = none): request r attends in latent space. Its
  // new tokens stay in the first launch's map, after every other row (the gather writes them into
  // the cache; no attention of the launch reads them), and the absorbed token list names them; its
  // queries get no key in the launches (their rows are written again by the latent path).
  void build(const MlaBatch& batch, const MlaPlanOptions& options, const BatchTotals& totals,
             uint8_t* block, StepPlan* out, const uint8_t* absorbed = nullptr);

 private:
  const MlaConfig& config_;
  const MlaLayout& layout_;
  plan::Scheduler scheduler_;
  plan::ScheduleKind kind_;
  int grid_blocks_;  // the kernel's persistent grid: sizes the head groups (plan/run_order.h)
  std::vector<int32_t> qo_, kv_, ctx_start_;  // max_batch + 1 each
};

}  // namespace mla
}  // namespace mlakit
