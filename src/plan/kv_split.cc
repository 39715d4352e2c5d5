#include "plan/kv_split.h"

#include <algorithm>

#include "plan/schedule_layout.h"
#include "plan/scheduler.h"

namespace mlakit {
namespace plan {

KvSplit kv_split_for(int64_t lq, int64_t lk, bool causal, int window_left, int heads, int block_m,
                     int block_n, const KvSplitSettings& settings) {
  KvSplit k;
  if (settings.max_items <= 0 || window_left >= 0 || lq <= 0 || lk <= 0 || heads <= 0) return k;
  const int64_t tiles = (lq + block_m - 1) / block_m;
  if (tiles * heads >= settings.max_items) return k;
  // kv tiles tile t walks (from key 0: there is no window), non-decreasing in t.
  auto kv_tiles = [&](int64_t t) {
    const int64_t r0 = t * block_m;
    return static_cast<int64_t>(tile_cost(r0, std::min(lq, r0 + block_m), lq, lk, causal, -1, block_n)) - 1;
  };
  const int64_t n_max = kv_tiles(tiles - 1);
  if (n_max < 2 * kMinChunkTiles) return k;
  const int64_t c = (n_max + 1) / 2;
  int64_t split = 0;
  for (int64_t t = tiles - 1; t >= 0 && kv_tiles(t) > c; --t) ++split;
  k.chunk_tiles = static_cast<int32_t>(c);
  k.split_tiles = static_cast<int32_t>(split);
  return k;
}

int64_t kv_split_slot_bound(int max_batch, int64_t max_q_tokens, int heads, int block_m, int max_items) {
  if (max_items <= 1 || heads <= 0) return 0;
  const int64_t by_batch = static_cast<int64_t>(max_batch) * (max_items - 1);
  const int64_t by_tiles = max_tiles_for(max_batch, max_q_tokens, block_m) * heads;
  return std::min(by_batch, by_tiles);
}

}  // namespace plan
}  // namespace mlakit
