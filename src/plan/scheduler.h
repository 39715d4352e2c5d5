// The planner: turns host indptr arrays into the WorkTile list that plan() publishes.
// Longest tiles first (cost = kv tiles visited + 1), so persistent blocks that pick tiles in
// order finish close together. A counting sort over the small cost range keeps plan() linear
// and allocation-free; scratch is sized once at construction from the capacity.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "contract/mask_rule.h"
#include "plan/kv_split.h"
#include "contract/schedule_layout.h"

namespace mlakit {
namespace plan {

// Visible keys [lo, hi) of query row `row` in a sequence with lengths (lq, lk): the shared mask
// rule (contract/mask_rule.h) on 64-bit host indices.
using KvRange = rule::KvRange<int64_t>;
inline KvRange visible_kv_range(int64_t row, int64_t lq, int64_t lk, bool causal, int window_left) {
  return rule::MaskRule<int64_t>{lq, lk, causal, window_left}.row_range(row);
}

// Unmasked (query, key) pairs of one sequence, closed form (no loop over rows).
int64_t visible_pairs(int64_t lq, int64_t lk, bool causal, int window_left);

// Cost of one q tile: kv tiles of block_n the tile's rows visit, + 1 for fixed overhead.
int32_t tile_cost(int64_t row_begin, int64_t row_end, int64_t lq, int64_t lk, bool causal,
                  int window_left, int block_n);

struct ScheduleResult {
  int num_tiles = 0;
  int num_runs = 0;     // build_runs only
  int num_items = 0;    // build_runs only: (q tile or half, head) items
  int split_slots = 0;  // build_runs only: split (q tile, head) pairs (plan/kv_split.h)
  int max_q_tiles = 0;  // build_runs only: q tiles of the batch's longest sequence
  int64_t visible_pairs = 0;
};

class Scheduler {
 public:
  // Capacity: the largest batch / token totals build() will see. `split`: which rules build_runs
  // applies to split key ranges (plan/kv_split.h); none by default.
  Scheduler(int max_batch, int64_t max_q_tokens, int64_t max_kv_tokens, int block_m, int block_n,
            KvSplitSettings split = {});

  int64_t max_tiles() const { return max_tiles_; }
  int block_m() const { return block_m_; }
  int block_n() const { return block_n_; }

  // Writes the sorted tiles to `tiles` (room for max_tiles()). Indptr arrays must already be
  // validated and within capacity (throws kInvalidArgument otherwise, before writing).
  ScheduleResult build(const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                       bool causal, int window_left, WorkTile* tiles);

  // ScheduleKind::kSequenceRuns: one SeqRun per sequence with q rows (room for max_batch),
  // longest (most kv tiles visited) first, ties by sequence index; item ranges for `heads` q heads,
  // with the split each sequence's own lengths decide (plan/kv_split.h).
  ScheduleResult build_runs(const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                            bool causal, int window_left, int heads, SeqRun* runs);

 private:
  int block_m_, block_n_;
  int max_batch_;
  int64_t max_q_tokens_, max_kv_tokens_;
  int64_t max_tiles_;
  KvSplitSettings split_;
  std::vector<int32_t> cost_;    // per tile, in generation order
  std::vector<int32_t> bucket_;  // counts, then start offsets, per cost
  std::vector<SeqRun> run_scratch_;  // build_runs, before sorting
};

}  // namespace plan
}  // namespace mlakit
