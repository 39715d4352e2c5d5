#include "plan/kv_split.h"

#include <algorithm>

#include "contract/schedule_layout.h"
#include "plan/scheduler.h"

namespace mlakit {
namespace plan {

int64_t tail_makespan(int64_t whole, int64_t halves, int64_t grid) {
  const int64_t rounds = whole / grid, rem = whole % grid;
  auto half_rounds = [&](int64_t h) { return (h + grid - 1) / grid; };
  if (rem == 0) return 2 * rounds + half_rounds(halves);
  const int64_t fit = 2 * (grid - rem);  // halves the idle blocks of the last whole round take
  return 2 * rounds + 2 + (halves > fit ? half_rounds(halves - fit) : 0);
}

namespace {

// The small-sequence rule (kv_split.h).
KvSplit small_sequence_split(int64_t lq, int64_t lk, bool causal, int heads, int block_m, int block_n,
                             const KvSplitSettings& settings) {
  KvSplit k;
  const int64_t tiles = (lq + block_m - 1) / block_m;
  if (settings.max_items <= 0 || tiles * heads >= settings.max_items) return k;
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

// The tail rule (kv_split.h).
KvSplit tail_split(int64_t lq, int64_t lk, bool causal, int heads, int block_m, int block_n,
                   const KvSplitSettings& settings) {
  KvSplit k;
  const int64_t grid = settings.tail_grid;
  if (grid <= 0 || causal || heads > kTailMaxHeads) return k;
  const int64_t items = (lq + block_m - 1) / block_m * heads;
  const int64_t n = (lk + block_n - 1) / block_n;
  if (items < kTailMinRounds * grid || n < 2 * kMinChunkTiles) return k;
  if (tail_makespan(items - heads, 2 * static_cast<int64_t>(heads), grid) >= tail_makespan(items, 0, grid)) return k;
  k.chunk_tiles = static_cast<int32_t>((n + 1) / 2);
  k.split_tiles = 1;
  k.halves_last = true;
  return k;
}

}  // namespace

KvSplit kv_split_for(int64_t lq, int64_t lk, bool causal, int window_left, int heads, int block_m,
                     int block_n, const KvSplitSettings& settings) {
  if (window_left >= 0 || lq <= 0 || lk <= 0 || heads <= 0) return KvSplit{};
  const KvSplit small = small_sequence_split(lq, lk, causal, heads, block_m, block_n, settings);
  if (small.chunk_tiles > 0) return small;
  return tail_split(lq, lk, causal, heads, block_m, block_n, settings);
}

int64_t kv_split_slot_bound(int max_batch, int64_t max_q_tokens, int heads, int block_m, int max_items,
                            int tail_grid) {
  if (heads <= 0) return 0;
  const int64_t max_items_total = max_tiles_for(max_batch, max_q_tokens, block_m) * heads;
  int64_t slots = 0;
  if (max_items > 1) {
    const int64_t by_batch = static_cast<int64_t>(max_batch) * (max_items - 1);
    slots += std::min(by_batch, max_items_total);
  }
  if (tail_grid > 0 && heads <= kTailMaxHeads) {
    // A sequence the tail rule splits has at least min_tiles q tiles, so more than
    // (min_tiles - 1) x block_m queries.
    const int64_t min_tiles = (int64_t{kTailMinRounds} * tail_grid + heads - 1) / heads;
    const int64_t sequences = std::min<int64_t>(max_batch, max_q_tokens / ((min_tiles - 1) * block_m + 1));
    slots += sequences * heads;
  }
  return slots;
}

}  // namespace plan
}  // namespace mlakit
