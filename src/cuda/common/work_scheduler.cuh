// Persistent-grid work distribution: the plan lists (sequence, q tile) pairs longest first;
// work item w is tile w / H for q head w % H, and block b takes items b, b + grid, b + 2 grid, ...
// Everything is read from the device schedule, so a captured launch follows a new plan.
#pragma once

#include <cstdint>

#include "cuda/prefill_launch.h"
#include "plan/schedule_layout.h"

namespace mlakit {
namespace cuda {

struct WorkItem {
  int head;
  int q_begin, lq;   // sequence's first q row (global) and length
  int kv_begin, lk;  // sequence's first kv row (global) and length
  int row0;          // first row of this tile inside the sequence
};

struct ScheduleView {
  const plan::ScheduleHeader* header;
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  const plan::WorkTile* tiles;

  __device__ __forceinline__ static ScheduleView from(const PrefillArgs& a) {
    const char* base = static_cast<const char*>(a.schedule);
    return {reinterpret_cast<const plan::ScheduleHeader*>(base),
            reinterpret_cast<const int32_t*>(base + a.qo_indptr_offset),
            reinterpret_cast<const int32_t*>(base + a.kv_indptr_offset),
            reinterpret_cast<const plan::WorkTile*>(base + a.tiles_offset)};
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
};

}  // namespace cuda
}  // namespace mlakit
