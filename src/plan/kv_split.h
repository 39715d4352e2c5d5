// Splitting a q tile's key range in two (the sm90 kernel; plain C++ the planner, its CPU tests
// and the kernel's decoding share).
//
// Why: a sequence whose (q tile, head) items are fewer than the persistent blocks leaves SMs idle,
// and its causal q tiles differ in length (one 999-token sequence at 16 heads is 128 items on 132
// SMs, the last tile eight times the first): the longest items set the time. Splitting the key
// range of its long tiles halves the longest item; the two halves run on two SMs, and whichever
// finishes second merges both (by log-sum-exp, in a fixed operand order) into the output.
//
// Batch invariance: whether and where a sequence splits depends only on its own lengths and the
// object's configuration (heads, mask, the persistent grid, the capacity), never on the rest of
// the batch, and the merge gives the same bits whichever half finishes first. So a sequence's
// output is bitwise the same alone or inside any batch, and from run to run.
//
// The rule, for a sequence with q tiles of n(t) kv tiles each (n_max the longest):
//   split iff splitting is on for the object, there is no sliding window, tiles x heads < the
//   persistent grid, and n_max >= 2 * kMinChunkTiles;
//   chunk 0 of a split tile is kv tiles [0, c), chunk 1 is [c, n(t)), c = ceil(n_max / 2);
//   the tiles that split are those with n(t) > c: without a window n(t) never decreases with t,
//   so they are the sequence's last `split_tiles` q tiles.
#pragma once

#include <cstdint>

namespace mlakit {
namespace plan {

constexpr int kMinChunkTiles = 2;  // a half of fewer kv tiles does not pay for its merge

// What one sequence does. chunk_tiles == 0: it does not split.
struct KvSplit {
  int32_t chunk_tiles = 0;  // c: kv tiles of chunk 0 (from the sequence's first visible key)
  int32_t split_tiles = 0;  // its last split_tiles q tiles split
};

// The object's setting (fixed at construction). max_items == 0: never split.
struct KvSplitSettings {
  int max_items = 0;           // a sequence with fewer (q tile, head) items than this splits
  int64_t slot_capacity = 0;   // partial-result slots the device scratch holds
};

KvSplit kv_split_for(int64_t lq, int64_t lk, bool causal, int window_left, int heads, int block_m,
                     int block_n, const KvSplitSettings& settings);

// Upper bound on the slots (one per split (q tile, head)) any batch within the capacity needs:
// a sequence that splits has fewer than max_items items, and all of them are q tiles x heads.
int64_t kv_split_slot_bound(int max_batch, int64_t max_q_tokens, int heads, int block_m, int max_items);

}  // namespace plan
}  // namespace mlakit
