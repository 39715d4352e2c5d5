// The order of the work items inside one kSequenceRuns run (contract/schedule_layout.h), shared by
// the planner, its CPU tests and the sm90 kernel's scheduler warp.
//
// A run holds num_tiles q tiles x H heads. Its heads are taken in groups of `head_group`; inside
// a group the q tiles go longest (last) first and the group's heads innermost:
//   group 0: tile T-1 of heads 0..G-1, tile T-2 of heads 0..G-1, ..., tile 0 ...; then group 1 ...
// Why: a persistent grid that takes items in this order starts the longest items first (a
// sequence with one group is longest-processing-time-first, so the last items to start are the
// shortest and the blocks finish together), while the ~132 items in flight at once stay within
// one group of heads and read the same few K/V streams, which stay in L2.
#pragma once

#include "contract/host_device.h"

namespace mlakit {
namespace plan {

// Heads per group: the largest divisor of `heads` not above `cap` (a divisor, so every group is
// whole and decoding needs no special case).
inline int largest_head_divisor(int heads, int cap) {
  for (int g = heads < cap ? heads : cap; g > 1; --g) {
    if (heads % g == 0) return g;
  }
  return 1;
}

// The cap: 16 keeps ~8 items per K/V stream in flight on a 132-SM GPU for 999-token prompts.
// Measured on the H200 (docs/performance.md): +1-3% on causal ragged batches over head-major
// order (one head per group), -8% on the 1x32768 non-causal workload.
constexpr int kMaxHeadGroup = 16;
inline int run_head_group(int heads) { return largest_head_divisor(heads, kMaxHeadGroup); }

// The group for a plan whose longest sequence has `max_q_tiles` q tiles, on a persistent grid of
// `grid_blocks` blocks (0: unknown, then the cap alone decides).
// - With neither causal masking nor a window every q tile of a sequence visits the same keys, so
//   there is no longest item to start first, and one head per group (head-major) keeps the whole
//   grid on one head's K/V, which then stays in L2.
// - Otherwise a group holds at most about one grid's worth of items, ceil(grid / q tiles) heads:
//   a long sequence's group then has few heads, whose K/V stays in L2 while the group runs,
//   instead of 16 heads' K/V streaming through it (H=128 x 8192 tokens: 84 MB for 16 heads, 10 MB
//   for 2). Measured on the H200 (docs/performance.md): H=128 1x8192 causal
//   627-636 -> 687-737 TFLOP/s with 2 heads per group, 1x16384 +1-8%, 999-token batches
//   unchanged (they keep 16).
inline int run_head_group(int heads, bool causal, int window_left, int max_q_tiles, int grid_blocks) {
  if (!(causal || window_left >= 0)) return 1;
  int cap = kMaxHeadGroup;
  if (grid_blocks > 0 && max_q_tiles > 0) {
    const int per_grid = (grid_blocks + max_q_tiles - 1) / max_q_tiles;
    if (per_grid < cap) cap = per_grid;
  }
  return largest_head_divisor(heads, cap);
}

struct RunSlot {
  int head;
  int q_tile;
};

// Item `local` (0-based inside the run) of a run with `num_tiles` q tiles.
MLAKIT_HD RunSlot run_slot(int local, int num_tiles, int head_group) {
  const int per_group = head_group * num_tiles;
  const int group = local / per_group;
  const int rem = local - group * per_group;
  const int rank = rem / head_group;  // 0 = the last (longest) q tile
  return RunSlot{group * head_group + (rem - rank * head_group), num_tiles - 1 - rank};
}

// With split tiles (plan/kv_split.h): a run whose last `split_tiles` q tiles split in two has
// num_tiles + split_tiles "virtual" tiles per head. Two orders, both longest first:
// - halves first (the small-sequence rule, whose halves are the run's longest items), ordered as
//   run_slot orders tiles: chunk 0 of the split tiles (longest tile first), then chunk 1 of the
//   split tiles, then the tiles that do not split (longest first), so the first halves start
//   first and the second halves, which merge, start after them;
// - halves last (the tail rule, whose whole items are all longer than its halves; it splits
//   exactly one q tile, the last): every whole item in run_slot's order over the num_tiles - 1
//   tiles that do not split, then the halves, head by head, chunk 0 and chunk 1 side by side.
//   Decoding it takes no division: the sm90 scheduler warp decodes each block's first item on
//   the launch's critical path.
// Each split (q tile, head) owns one partial-result slot,
// head * split_tiles + (num_tiles - 1 - q_tile), relative to the run's first slot.
struct RunItemSlot {
  int head;
  int q_tile;
  int chunk;  // -1: the tile's whole kv range; 0 / 1: a half of a split tile
  int slot;   // chunk >= 0: the slot the tile's two halves share; -1 otherwise
};

MLAKIT_HD RunItemSlot run_item_slot(int local, int num_tiles, int split_tiles, int head_group,
                                    bool halves_last = false, int heads = 0) {
  RunItemSlot r;
  int v_tiles = num_tiles + split_tiles;
  if (halves_last) {  // split_tiles == 1
    const int whole_items = (num_tiles - 1) * heads;
    if (local >= whole_items) {
      const int h = local - whole_items;  // rank among the halves: head h / 2, chunk h % 2
      r.head = h >> 1;
      r.q_tile = num_tiles - 1;
      r.chunk = h & 1;
      r.slot = r.head;
      return r;
    }
    v_tiles = num_tiles - 1;  // a whole item: run_slot's order over the tiles that do not split
  }
  // One run_slot for both orders (its divisions are the decode's cost).
  const RunSlot s = run_slot(local, v_tiles, head_group);
  r.head = s.head;
  if (halves_last) {
    r.q_tile = s.q_tile;
    r.chunk = -1;
    r.slot = -1;
    return r;
  }
  const int rank = v_tiles - 1 - s.q_tile;  // 0 = the first virtual tile
  const int u = rank < split_tiles ? rank : rank - split_tiles;  // rank among the q tiles
  r.q_tile = num_tiles - 1 - u;
  r.chunk = rank < split_tiles ? 0 : (u < split_tiles ? 1 : -1);
  r.slot = r.chunk >= 0 ? s.head * split_tiles + u : -1;
  return r;
}

}  // namespace plan
}  // namespace mlakit
