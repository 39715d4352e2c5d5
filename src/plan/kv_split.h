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
// The small-sequence rule, for a sequence with q tiles of n(t) kv tiles each (n_max the longest):
//   split iff that rule is on for the object, there is no sliding window, tiles x heads < the
//   persistent grid, and n_max >= 2 * kMinChunkTiles;
//   chunk 0 of a split tile is kv tiles [0, c), chunk 1 is [c, n(t)), c = ceil(n_max / 2);
//   the tiles that split are those with n(t) > c: without a window n(t) never decreases with t,
//   so they are the sequence's last `split_tiles` q tiles. Halves run first (they are its
//   longest items: longest-processing-time-first).
//
// The tail rule (a sequence that fills the grid many times over, non-causal, no window: every
// item costs the same n kv tiles). Alone, its I = tiles x heads items end on a last round of
// I mod grid items while the other blocks idle: 1x32768 at 16 heads is 4096 items on 132 SMs,
// 31.03 rounds run in 32 (3% of the launch). Splitting its last q tile (`heads` items) into
// 2 x heads halves of n / 2 kv tiles, run after every whole item, lets the halves fill the
// blocks the last round leaves idle (1x32768: 32 rounds -> 31.5). The rule splits iff
//   the tail rule is on, heads <= kTailMaxHeads, I >= kTailMinRounds x grid, n >= 2 *
//   kMinChunkTiles, and tail_makespan(I - heads, 2 heads) < tail_makespan(I, 0)
// (list scheduling of equal items in the run's order: whole items, then the halves). Then
// split_tiles = 1, chunk_tiles = ceil(n / 2), halves_last = true.
#pragma once

#include <cstdint>

namespace mlakit {
namespace plan {

constexpr int kMinChunkTiles = 2;  // a half of fewer kv tiles does not pay for its merge
// Tail rule bounds. Heads: each split sequence takes `heads` slots (~68 KiB each), and the
// workspace is sized for the most such sequences the capacity allows; rounds: a sequence of
// fewer rounds alone is short enough that its tail is the batch's business, not its own.
constexpr int kTailMaxHeads = 32;
constexpr int kTailMinRounds = 4;

// What one sequence does. chunk_tiles == 0: it does not split.
struct KvSplit {
  int32_t chunk_tiles = 0;  // c: kv tiles of chunk 0 (from the sequence's first visible key)
  int32_t split_tiles = 0;  // its last split_tiles q tiles split
  bool halves_last = false; // the run's order: halves after the whole tiles (tail rule;
                            // then split_tiles == 1)
};

// The object's setting (fixed at construction). max_items == 0: never split.
struct KvSplitSettings {
  int max_items = 0;           // small-sequence rule: fewer (q tile, head) items than this split
  int64_t slot_capacity = 0;   // partial-result slots the device scratch holds
  int tail_grid = 0;           // tail rule: the persistent grid (0: off)
};

// The tail rule's makespan, in half-items, of `whole` equal items then `halves` half-items
// list-scheduled on `grid` blocks (whole items run in rounds; the halves fill the blocks the
// last partial round leaves idle, then further rounds of halves).
int64_t tail_makespan(int64_t whole, int64_t halves, int64_t grid);

KvSplit kv_split_for(int64_t lq, int64_t lk, bool causal, int window_left, int heads, int block_m,
                     int block_n, const KvSplitSettings& settings);

// Upper bound on the slots (one per split (q tile, head)) any batch within the capacity needs:
// by the small-sequence rule a sequence that splits has fewer than max_items items, all of them
// q tiles x heads; by the tail rule it has at least kTailMinRounds x tail_grid items and takes
// `heads` slots.
int64_t kv_split_slot_bound(int max_batch, int64_t max_q_tokens, int heads, int block_m, int max_items,
                            int tail_grid = 0);

}  // namespace plan
}  // namespace mlakit
