// Schedule building: one schedule block (header, both indptr arrays, sorted tiles; see
// schedule_layout.h) written into host staging for a batch. RaggedPrefill writes one block per
// plan; MlaStep writes several (new tokens, each context chunk) into one workspace.
#pragma once

#include <cstdint>

#include "mlakit/prefill.h"
#include "contract/schedule_layout.h"
#include "plan/scheduler.h"

namespace mlakit {
namespace plan {

// sm_scale of the options, or 1/sqrt(head_dim_qk) when it is 0.
float resolve_sm_scale(const PrefillOptions& options, int head_dim_qk);

// Fills the block at `block` (room for layout.total_bytes) for a validated batch within the
// scheduler's capacity. Returns what the scheduler decided; the block's used bytes are
// block_used_bytes(layout, kind, result).
// `kind`: the work array the kernel reads (KernelChoice::schedule_kind); kSequenceRuns item ranges
// count `num_qo_heads` heads. `grid_blocks`: the persistent grid the kernel runs on (0: unknown),
// which sizes the kSequenceRuns head groups (plan/run_order.h).
ScheduleResult write_schedule_block(uint8_t* block, const ScheduleLayout& layout,
                                    Scheduler& scheduler, const int32_t* qo_indptr,
                                    const int32_t* kv_indptr, int batch_size,
                                    const PrefillOptions& options, int head_dim_qk, ScheduleKind kind,
                                    int num_qo_heads, int grid_blocks);

// The prefix of a block write_schedule_block filled (what a plan publishes).
inline size_t block_used_bytes(const ScheduleLayout& layout, ScheduleKind kind, const ScheduleResult& r) {
  return layout.used_bytes(kind, kind == ScheduleKind::kSequenceRuns ? r.num_runs : r.num_tiles);
}

}  // namespace plan
}  // namespace mlakit
