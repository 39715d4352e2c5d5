// The schedule that plan() writes and the kernels read: plain old data shared by host C++ and
// CUDA code. One contiguous block, the same layout in the host staging buffer and in the device
// workspace, so plan() publishes it with a single async copy of the used prefix.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlakit {
namespace plan {

// Everything that may change between plan() calls lives here (not in kernel arguments), so a
// captured run() replays correctly after re-planning.
struct ScheduleHeader {
  int32_t num_tiles;       // valid entries in tiles[]
  int32_t batch_size;
  int32_t total_q;
  int32_t total_kv;
  int32_t causal;          // 0 / 1
  int32_t window_left;     // -1 = none
  float sm_scale_log2;     // sm_scale * log2(e) (used when soft cap is off)
  float sm_scale;
  float soft_cap;          // 0 = none
  int32_t block_m;
  int32_t block_n;
  int32_t schedule_kind;   // ScheduleKind: what the work array holds
  int32_t num_runs;        // kSequenceRuns: valid entries in runs[]
  int32_t num_items;       // work items = num_tiles * num_qo_heads
  int32_t head_group;      // kSequenceRuns: heads per group inside a run (plan/run_order.h)
  int32_t reserved[1];
};
static_assert(sizeof(ScheduleHeader) == 64, "header is 64 bytes");

// How the work array orders the (sequence, q tile, q head) items; each kernel's table entry says
// which it reads.
enum class ScheduleKind : int32_t {
  // WorkTile[num_tiles], longest tile first; item w is tile w / H for head w % H (the sm80
  // kernel's static round-robin, and the CPU backend).
  kTilesLongestFirst = 0,
  // SeqRun[num_runs], one per sequence with q rows, longest sequence first; inside a run, groups
  // of heads, each q tiles longest first (plan/run_order.h), so the items in flight at any time
  // share a few (sequence, head) K/V streams in L2 and the longest start first (the sm90
  // kernel's dynamic scheduler).
  kSequenceRuns = 1,
};

// One unit of work per q head: q rows [q_tile * block_m, min(lq, (q_tile + 1) * block_m)) of
// sequence `seq`, over that tile's visible kv range.
struct WorkTile {
  int32_t seq;
  int32_t q_tile;
};

// Items [item_begin, item_begin + (num_tiles + split_tiles) * H) are sequence `seq`'s, in the
// order of plan/run_order.h (run_item_slot). Its last split_tiles q tiles split their key range
// at kv tile chunk_tiles (plan/kv_split.h), their halves first or last (halves_last); each split
// (q tile, head) owns a partial-result slot
// in [slot_begin, slot_begin + split_tiles * H).
struct SeqRun {
  int32_t seq;
  int32_t num_tiles;
  int32_t item_begin;
  int32_t cost;  // kv tiles visited over the sequence's q tiles (one head); the sort key
  int32_t split_tiles;  // 0: no tile splits
  int32_t chunk_tiles;  // kv tiles of a split tile's first half
  int32_t slot_begin;
  int32_t halves_last;  // 1: the halves run after the whole tiles (run_order.h, the tail rule)
};
static_assert(sizeof(SeqRun) == 32, "two 16-byte words");

// Byte offsets of each array inside the block, fixed by the capacity.
struct ScheduleLayout {
  size_t qo_indptr_offset;  // int32[max_batch + 1]
  size_t kv_indptr_offset;  // int32[max_batch + 1]
  size_t tiles_offset;      // the work array: WorkTile[max_tiles] or SeqRun[max_batch]
  size_t total_bytes;       // capacity of the block
  int64_t max_tiles;

  // Bytes plan() publishes: everything up to the last valid work entry.
  size_t used_bytes(ScheduleKind kind, int num_entries) const {
    const size_t entry = kind == ScheduleKind::kSequenceRuns ? sizeof(SeqRun) : sizeof(WorkTile);
    return tiles_offset + static_cast<size_t>(num_entries) * entry;
  }
};

inline size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Upper bound on tiles: every sequence contributes ceil(lq / block_m) <= lq / block_m + 1.
inline int64_t max_tiles_for(int max_batch, int64_t max_q_tokens, int block_m) {
  return max_q_tokens / block_m + max_batch + 1;
}

// Room for the work array of `kind` only (`either`: room for both kinds, for blocks built before
// the kernel is known).
inline ScheduleLayout make_layout(int max_batch, int64_t max_q_tokens, int block_m, ScheduleKind kind,
                                  bool either = false) {
  ScheduleLayout l{};
  l.max_tiles = max_tiles_for(max_batch, max_q_tokens, block_m);
  size_t off = sizeof(ScheduleHeader);
  l.qo_indptr_offset = off;
  off = align_up(off + sizeof(int32_t) * (static_cast<size_t>(max_batch) + 1), 16);
  l.kv_indptr_offset = off;
  off = align_up(off + sizeof(int32_t) * (static_cast<size_t>(max_batch) + 1), 16);
  l.tiles_offset = off;
  const size_t tiles_bytes = sizeof(WorkTile) * static_cast<size_t>(l.max_tiles);
  const size_t runs_bytes = sizeof(SeqRun) * static_cast<size_t>(max_batch);
  if (either) off += tiles_bytes > runs_bytes ? tiles_bytes : runs_bytes;
  else off += kind == ScheduleKind::kSequenceRuns ? runs_bytes : tiles_bytes;
  l.total_bytes = align_up(off, 256);
  return l;
}
inline ScheduleLayout make_layout(int max_batch, int64_t max_q_tokens, int block_m) {
  return make_layout(max_batch, max_q_tokens, block_m, ScheduleKind::kTilesLongestFirst, true);
}

}  // namespace plan
}  // namespace mlakit
