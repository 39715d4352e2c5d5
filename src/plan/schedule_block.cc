#include "plan/schedule_block.h"

#include "plan/run_order.h"

#include <cmath>
#include <cstring>

namespace mlakit {
namespace plan {

float resolve_sm_scale(const PrefillOptions& o, int head_dim_qk) {
  return o.sm_scale > 0.0f ? o.sm_scale
                           : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim_qk)));
}

ScheduleResult write_schedule_block(uint8_t* block, const ScheduleLayout& l, Scheduler& s,
                                    const int32_t* qo, const int32_t* kv, int batch,
                                    const PrefillOptions& o, int head_dim_qk, ScheduleKind kind,
                                    int num_qo_heads, int grid_blocks) {
  uint8_t* work = block + l.tiles_offset;
  const ScheduleResult r =
      kind == ScheduleKind::kSequenceRuns
          ? s.build_runs(qo, kv, batch, o.causal, o.window_left, num_qo_heads, reinterpret_cast<SeqRun*>(work))
          : s.build(qo, kv, batch, o.causal, o.window_left, reinterpret_cast<WorkTile*>(work));

  ScheduleHeader h{};
  h.num_tiles = r.num_tiles;
  h.batch_size = batch;
  h.total_q = qo[batch];
  h.total_kv = kv[batch];
  h.causal = o.causal ? 1 : 0;
  h.window_left = o.window_left;
  h.sm_scale = resolve_sm_scale(o, head_dim_qk);
  h.sm_scale_log2 = static_cast<float>(static_cast<double>(h.sm_scale) * 1.4426950408889634);
  h.soft_cap = o.logits_soft_cap;
  h.block_m = s.block_m();
  h.block_n = s.block_n();
  h.schedule_kind = static_cast<int32_t>(kind);
  h.num_runs = r.num_runs;
  h.num_items = kind == ScheduleKind::kSequenceRuns
                    ? r.num_items
                    : static_cast<int32_t>(static_cast<int64_t>(r.num_tiles) * num_qo_heads);
  h.head_group = run_head_group(num_qo_heads, o.causal, o.window_left, r.max_q_tiles, grid_blocks);
  std::memcpy(block, &h, sizeof(h));
  const size_t indptr_bytes = sizeof(int32_t) * (static_cast<size_t>(batch) + 1);
  std::memcpy(block + l.qo_indptr_offset, qo, indptr_bytes);
  std::memcpy(block + l.kv_indptr_offset, kv, indptr_bytes);
  return r;
}

}  // namespace plan
}  // namespace mlakit
