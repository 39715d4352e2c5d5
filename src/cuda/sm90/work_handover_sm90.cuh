// Work items from the plan to the consumers: the scheduler warp decodes them (dynamic
// scheduling on an atomic counter) and they travel scheduler -> producer -> consumers through
// per-block slots in the device scratch.
#pragma once

#include "contract/mask_rule.h"
#include "cuda/common/work_scheduler.cuh"
#include "cuda/sm90/kernel_layout_sm90.cuh"
#include "cuda/sm90/ptx_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

// A descale factor [seq, kv_head] of PrefillArgs (1 when absent).
__device__ __forceinline__ float descale_at(const float* d, int64_t stride_b, int64_t stride_h, int seq, int kvh) {
  return d == nullptr ? 1.f : __ldg(d + seq * stride_b + kvh * stride_h);
}

template <typename Shape>
__device__ __forceinline__ ItemPlan plan_item(const ScheduleView& sched, const plan::ScheduleHeader& hdr, int w,
                                              const PrefillArgs& a) {
  constexpr int BM = Shape::BM, BN = Shape::BN;
  ItemPlan ip;
  ip.valid = 1;
  const RunWorkItem ri = sched.run_item(w, hdr.num_runs, hdr.head_group, a.num_qo_heads, BM);
  ip.it = ri.it;
  ip.rows = min(BM, ip.it.lq - ip.it.row0);
  const rule::MaskRule<int> mr{ip.it.lq, ip.it.lk, hdr.causal != 0, hdr.window_left};
  const rule::KvRange<int> span = mr.tile_range(ip.it.row0, ip.rows);
  ip.n_begin = (span.lo / BN) * BN;
  ip.n_tiles = span.empty() ? 0 : (span.hi - ip.n_begin + BN - 1) / BN;
  ip.chunk = ri.chunk;
  ip.slot = ri.slot;
  // A split tile has no window, so its range starts at key 0: the halves are kv tiles
  // [0, chunk_tiles) and [chunk_tiles, n_tiles), both non-empty by the plan's rule.
  if (ri.chunk == 0) {
    ip.n_tiles = ri.chunk_tiles;
  } else if (ri.chunk == 1) {
    ip.n_begin += ri.chunk_tiles * BN;
    ip.n_tiles -= ri.chunk_tiles;
  }
  if constexpr (Shape::kFp8) {
    // Read here, off the consumers' path: the scheduler decodes each item while the block's
    // current one still runs.
    const int kvh = ip.it.head / (a.num_qo_heads / a.num_kv_heads);
    ip.qk_descale = descale_at(a.q_descale, a.qd_stride_b, a.qd_stride_h, ri.seq, kvh) *
                    descale_at(a.k_descale, a.kd_stride_b, a.kd_stride_h, ri.seq, kvh);
    ip.v_descale = descale_at(a.v_descale, a.vd_stride_b, a.vd_stride_h, ri.seq, kvh);
  }
  return ip;
}

// The hand-over slots live in this block's device scratch, not in shared memory: a global slot
// is as cheap for one item per tile, and it keeps compute-sanitizer's racecheck (which tracks
// shared memory and does not model bar.arrive -> bar.sync hand-overs) free of false reports.
// Loads and stores go to L2 (.cg), so no stale L1 line is ever read.
template <typename Shape>
__device__ __forceinline__ ItemPlan* item_slot(const PrefillArgs& a, int hop) {
  return reinterpret_cast<ItemPlan*>(reinterpret_cast<unsigned char*>(block_tensor_maps<Shape>(a) + Shape::kNumMaps) +
                                     hop * Shape::kSlotBytes);
}
// e4m3: the V stages' valid-key counts (kernel_layout_sm90.cuh), after the item slots.
template <typename Shape>
__device__ __forceinline__ int* v_valid_slots(const PrefillArgs& a) {
  return reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(item_slot<Shape>(a, 2)));
}
// The first kWords 16-byte words (item_words: the descales travel only for e4m3).
template <int kWords>
__device__ __forceinline__ void store_item(ItemPlan* slot, const ItemPlan& ip) {
  const int4* src = reinterpret_cast<const int4*>(&ip);
  int4* dst = reinterpret_cast<int4*>(slot);
#pragma unroll
  for (int i = 0; i < kWords; ++i) __stcg(dst + i, src[i]);
}
template <int kWords>
__device__ __forceinline__ ItemPlan load_item(const ItemPlan* slot) {
  ItemPlan ip;
  int4* dst = reinterpret_cast<int4*>(&ip);
  const int4* src = reinterpret_cast<const int4*>(slot);
#pragma unroll
  for (int i = 0; i < kWords; ++i) dst[i] = __ldcg(src + i);
  return ip;
}

// Warp 1 of warpgroup 0: dynamic scheduling. The first item is blockIdx.x, then whatever the
// counter hands out, so a block that drew short items takes more of them. Each is claimed and
// decoded (a binary search over the plan's runs) while the current item's last kv tiles are still
// in flight: the producer asks once it has issued that item's last load.
template <typename Shape>
__device__ __forceinline__ void scheduler_warp(const Sm90Params& p, const ScheduleView& sched,
                                               const plan::ScheduleHeader& hdr, int lane) {
  int* next_item = static_cast<int*>(p.args.scratch);  // items handed out beyond the first grid
  int* blocks_done = next_item + 1;
  ItemPlan* slot = item_slot<Shape>(p.args, 0);
  int w = blockIdx.x;
  // An item is claimed only when the producer asks for it, i.e. once it has issued the last load
  // of the block's current item (about two kv tiles before that item ends). Claiming at the start
  // of the current item instead (one item ahead) hands the plan's long items to blocks that are
  // still busy for a whole long item: the last long items then start late and the launch ends on
  // them (measured with MLAKIT_SM90_TRACE: 11-14% of 8x999+200 and 8x999 spent in that tail).
  for (bool first = true;; first = false) {
    named_barrier_sync<kBarSchedEmpty, kSchedHop>();  // the producer wants its next item
    if (!first) {
      int next = 0;
      if (lane == 0) next = atomicAdd(next_item, 1);
      w = __shfl_sync(0xffffffffu, next, 0) + static_cast<int>(gridDim.x);
    }
    ItemPlan ip{};  // valid = 0: no more work
    if (w < hdr.num_items) ip = plan_item<Shape>(sched, hdr, w, p.args);
    if (lane == 0) store_item<item_words<Shape>()>(slot, ip);
    __syncwarp();
    named_barrier_arrive<kBarSchedFull, kSchedHop>();
    if (!ip.valid) break;
  }
  // No item left for this block (PDL, docs/sm90-kernel.md): the next kernel's blocks may be scheduled
  // as SMs free up; they still wait for this whole grid before touching memory.
  pdl_launch_dependents();
  // The last block out leaves the counters zero for the next launch (or graph replay).
  if (lane == 0) {
    __threadfence();
    if (atomicAdd(blocks_done, 1) == static_cast<int>(gridDim.x) - 1) {
      atomicExch(next_item, 0);
      atomicExch(blocks_done, 0);
    }
  }
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
