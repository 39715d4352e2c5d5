// The planner: turns host indptr arrays into the WorkTile list that plan() publishes.
// Longest tiles first (cost = kv tiles visited + 1), so persistent blocks that pick tiles in
// order finish close together. A counting sort over the small cost range keeps plan() linear
// and allocation-free; scratch is sized once at construction from the capacity.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "plan/schedule_layout.h"

namespace mlakit {
namespace plan {

// Visible keys [lo, hi) of query row `row` in a sequence with lengths (lq, lk); hi <= lo: none.
// Semantics of mlakit/prefill.h: causal keeps j <= lk - lq + row (bottom-right aligned),
// window_left = w >= 0 keeps j >= lk - lq + row - w.
struct KvRange {
  int64_t lo;
  int64_t hi;
  bool empty() const { return hi <= lo; }
};
inline KvRange visible_kv_range(int64_t row, int64_t lq, int64_t lk, bool causal, int window_left) {
  const int64_t diag = lk - lq + row;
  const int64_t hi = causal ? std::min(lk, diag + 1) : lk;
  const int64_t lo = window_left >= 0 ? std::max<int64_t>(0, diag - window_left) : 0;
  return {lo, hi};
}

// Unmasked (query, key) pairs of one sequence, closed form (no loop over rows).
int64_t visible_pairs(int64_t lq, int64_t lk, bool causal, int window_left);

// Cost of one q tile: kv tiles of block_n the tile's rows visit, + 1 for fixed overhead.
int32_t tile_cost(int64_t row_begin, int64_t row_end, int64_t lq, int64_t lk, bool causal,
                  int window_left, int block_n);

struct ScheduleResult {
  int num_tiles = 0;
  int64_t visible_pairs = 0;
};

class Scheduler {
 public:
  // Capacity: the largest batch / token totals build() will see.
  Scheduler(int max_batch, int64_t max_q_tokens, int64_t max_kv_tokens, int block_m, int block_n);

  int64_t max_tiles() const { return max_tiles_; }
  int block_m() const { return block_m_; }
  int block_n() const { return block_n_; }

  // Writes the sorted tiles to `tiles` (room for max_tiles()). Indptr arrays must already be
  // validated and within capacity (throws kInvalidArgument otherwise, before writing).
  ScheduleResult build(const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                       bool causal, int window_left, WorkTile* tiles);

 private:
  int block_m_, block_n_;
  int max_batch_;
  int64_t max_q_tokens_, max_kv_tokens_;
  int64_t max_tiles_;
  std::vector<int32_t> cost_;    // per tile, in generation order
  std::vector<int32_t> bucket_;  // counts, then start offsets, per cost
};

}  // namespace plan
}  // namespace mlakit
