// Decoding work items from the device schedule (contract/schedule_layout.h): item() for the
// longest-tile-first list (tile w / H, head w % H; the sm80 kernel's blocks take items b,
// b + grid, ...), run_item() for the per-sequence runs the sm90 kernel's dynamic scheduler walks.
// Everything is read from the device schedule, so a captured launch follows a new plan.
#pragma once

#include <cstdint>

#include "contract/prefill_launch.h"
#include "plan/run_order.h"
#include "contract/schedule_layout.h"

namespace mlakit {
namespace cuda {

struct WorkItem {
  int head;
  int q_begin, lq;   // sequence's first q row (global) and length
  int kv_begin, lk;  // sequence's first kv row (global) and length
  int row0;          // first row of this tile inside the sequence
};

// A kSequenceRuns item: the tile, and which half of a split key range it is (plan/kv_split.h).
struct RunWorkItem {
  WorkItem it;
  int chunk;        // -1: the whole kv range; 0: kv tiles [0, chunk_tiles); 1: the rest
  int chunk_tiles;
  int slot;         // chunk >= 0: the partial-result slot of its (q tile, head)
  int seq;          // the sequence's index in the batch (per-sequence data such as FP8 descales)
};

struct ScheduleView {
  const plan::ScheduleHeader* header;
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  const plan::WorkTile* tiles;  // ScheduleKind::kTilesLongestFirst
  const plan::SeqRun* runs;     // ScheduleKind::kSequenceRuns (the same array)

  __device__ __forceinline__ static ScheduleView from(const PrefillArgs& a) {
    const char* base = static_cast<const char*>(a.schedule);
    return {reinterpret_cast<const plan::ScheduleHeader*>(base),
            reinterpret_cast<const int32_t*>(base + a.qo_indptr_offset),
            reinterpret_cast<const int32_t*>(base + a.kv_indptr_offset),
            reinterpret_cast<const plan::WorkTile*>(base + a.tiles_offset),
            reinterpret_cast<const plan::SeqRun*>(base + a.tiles_offset)};
  }

  __device__ __forceinline__ WorkItem item(int w, int num_heads, int block_m) const {
    const plan::WorkTile t = tiles[w / num_heads];
    WorkItem it;
    it.head = w % num_heads;
    it.q_begin = qo_indptr[t.seq];
    it.lq = qo_indptr[t.seq + 1] - it.q_begin;
    it.kv_begin = kv_indptr[t.seq];
    it.lk = kv_indptr[t.seq + 1] - it.kv_begin;
    it.row0 = t.q_tile * block_m;
    return it;
  }

  // Item w of a kSequenceRuns schedule: the run holding it by binary search over item_begin
  // (ascending), then its (head, q tile, half) in the run's order (plan/run_order.h).
  __device__ __forceinline__ RunWorkItem run_item(int w, int num_runs, int head_group, int num_heads,
                                                       int block_m) const {
    int lo = 0, hi = num_runs - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (runs[mid].item_begin <= w) lo = mid;
      else hi = mid - 1;
    }
    const plan::SeqRun r = runs[lo];
    const plan::RunItemSlot slot = plan::run_item_slot(w - r.item_begin, r.num_tiles, r.split_tiles, head_group,
                                                          r.halves_last != 0, num_heads);
    RunWorkItem ri;
    WorkItem& it = ri.it;
    it.head = slot.head;
    it.q_begin = qo_indptr[r.seq];
    it.lq = qo_indptr[r.seq + 1] - it.q_begin;
    it.kv_begin = kv_indptr[r.seq];
    it.lk = kv_indptr[r.seq + 1] - it.kv_begin;
    it.row0 = slot.q_tile * block_m;
    ri.chunk = slot.chunk;
    ri.chunk_tiles = r.chunk_tiles;
    ri.slot = slot.chunk >= 0 ? r.slot_begin + slot.slot : -1;
    ri.seq = r.seq;
    return ri;
  }
};

}  // namespace cuda
}  // namespace mlakit
