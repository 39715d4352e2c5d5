// The Hopper (sm_90a) ragged prefill kernel: warp-specialized, TMA + wgmma, persistent.
//
// A block of three warpgroups owns one 128-row q tile of one (sequence, q head) at a time:
//   - warpgroup 0 gives its registers away (setmaxnreg) and runs two warps:
//     the scheduler warp takes work items dynamically (an atomic counter in the device scratch,
//     reset by the last block out) and decodes the next one while the current one runs;
//     the producer warp issues the TMA loads: Q once per item, then K one tile ahead of V into a
//     two-stage shared-memory ring, each load completing on an mbarrier; "empty" mbarriers tell
//     it when a stage may be refilled.
//   - warpgroups 1 and 2 (the consumers, 232 registers each): 64 query rows each. Per kv tile:
//     S = Q K^T with wgmma (both operands in shared memory, 12 k-steps of 16 for Dqk = 192), the
//     online softmax in registers, then O += P V with P as the register A operand and V read
//     MN-major straight from its token-major layout (no transpose copy, V never padded).
//     The next tile's S = Q K^T is issued before this tile's P V, O is rescaled while S runs, and
//     the softmax runs while P V is in flight (FlashAttention-3's intra-warpgroup overlap).
// Items travel scheduler -> producer -> consumers through shared-memory slots handed over with
// named barriers. The plan orders items so that those in flight together are q tiles of the same
// (sequence, head) and share its K/V in L2 (plan::ScheduleKind::kSequenceRuns).
// Nothing is padded: a kv tile that runs past the sequence is masked (scores -> -inf), and the V
// rows past the sequence are zeroed in shared memory so 0 * (whatever is there) cannot make NaN.
// Extents: each block rewrites the outermost extent of its copies of the tensor maps to the
// plan's totals (read from the device schedule), so TMA zero-fills past the batch and never
// reads past it, and a CUDA graph replayed after re-planning reads the new extents.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/mask_rule.h"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/score_transform.cuh"
#include "cuda/common/tile_store.cuh"
#include "cuda/common/work_scheduler.cuh"
#include "cuda/prefill_launch.h"
#include "cuda/sm90/ptx_sm90.cuh"

// Pipeline-order variants measured against each other (docs/perf-notes.md):
// K_AHEAD: the producer loads K one tile ahead of V; RESCALE_EARLY: O is rescaled while S runs.
#ifndef MLAKIT_SM90_K_AHEAD
#define MLAKIT_SM90_K_AHEAD 1
#endif
#ifndef MLAKIT_SM90_RESCALE_EARLY
#define MLAKIT_SM90_RESCALE_EARLY 1
#endif
// PINGPONG: the two consumer warpgroups take turns issuing their matrix products (a pair of named
// barriers passes the turn), so one's softmax runs while the other's products keep the tensor
// cores busy. SOFTMAX_AFTER_PV: the softmax of S_t waits for P_{t-1} V_{t-1} as well.
#ifndef MLAKIT_SM90_PINGPONG
#define MLAKIT_SM90_PINGPONG 0
#endif
#ifndef MLAKIT_SM90_SOFTMAX_AFTER_PV
#define MLAKIT_SM90_SOFTMAX_AFTER_PV 0
#endif
// K0_FIRST: the producer issues an item's first K tile before it waits for the Q buffer (the K
// stage frees a step earlier than Q does).
#ifndef MLAKIT_SM90_K0_FIRST
#define MLAKIT_SM90_K0_FIRST 0
#endif
// Measurement only (wrong results; bound what hiding a cost could gain): EXP_Q_ONCE loads Q for
// a block's first item only; EXP_NO_STORE skips the epilogue's stores.
// TMA_STORE: the epilogue writes O into the V stage its last P V read and stores it with TMA
// (off: from registers with 4-byte stores, which ncu showed throttling the load/store queue).
#ifndef MLAKIT_SM90_TMA_STORE
#define MLAKIT_SM90_TMA_STORE 1
#endif
// Q_PER_BOX: Q's three 64-column boxes complete on their own mbarriers, and an item's first
// S = Q K^T issues each box's k-steps as soon as that box has landed.
#ifndef MLAKIT_SM90_Q_PER_BOX
#define MLAKIT_SM90_Q_PER_BOX 0
#endif
#ifndef MLAKIT_SM90_EXP_Q_ONCE
#define MLAKIT_SM90_EXP_Q_ONCE 0
#endif
#ifndef MLAKIT_SM90_EXP_NO_STORE
#define MLAKIT_SM90_EXP_NO_STORE 0
#endif

namespace mlakit {
namespace cuda {
namespace sm90 {

template <int DQK_, int DVO_>
struct Sm90Shape {
  static constexpr int DQK = DQK_;
  static constexpr int DVO = DVO_;
  static constexpr int BM = 128;  // q rows per tile (two consumer warpgroups x 64)
  static constexpr int BN = 128;  // keys per kv tile
  static constexpr int kStages = 2;
  static constexpr int kThreads = 384;
  static constexpr int kConsumerWarps = 8;
  static constexpr int kQBoxes = DQK / 64;  // TMA boxes are 64 columns (128 bytes) wide
  static constexpr int kVBoxes = DVO / 64;
  static constexpr int kBoxBytesQ = BM * 128;
  static constexpr int kBoxBytesKV = BN * 128;
  static constexpr int kQBytes = kQBoxes * kBoxBytesQ;
  static constexpr int kKBytes = kQBoxes * kBoxBytesKV;  // one stage
  static constexpr int kVBytes = kVBoxes * kBoxBytesKV;  // one stage
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKBytes;
  static constexpr int kOffBars = kOffV + kStages * kVBytes;
  static constexpr int kNumBars = 2 + 4 * kStages + 2;  // + Q boxes 1 and 2 (MLAKIT_SM90_Q_PER_BOX)
  static constexpr int kOffFlags = kOffBars + kNumBars * 8;  // int per consumer warpgroup (split merge)
  static constexpr int kOffMaps = (kOffFlags + 8 + 127) / 128 * 128;
  static constexpr int kNumMaps = 5;  // q, k, k_rope, v, o
  // + 1024: the dynamic shared-memory base is re-aligned to the 1024-byte swizzle atom.
  static constexpr int kSmemBytes = kOffMaps + kNumMaps * 128 + 1024;
  // Device scratch: two work counters (next item, blocks done), then per block its tensor maps
  // and the two item hand-over slots (scheduler -> producer -> consumers).
  static constexpr size_t kScratchFixed = 128;
  static constexpr size_t kSlotBytes = 64;
  static constexpr size_t kScratchPerBlock = kNumMaps * 128 + 2 * kSlotBytes;
  // Split key ranges (plan/kv_split.h): per split (q tile, head) slot, one arrival counter per
  // consumer warpgroup (128 bytes), then per half and warpgroup its partial state in fragment
  // order: 16 float4 of unnormalized O per thread ([n][thread]), then (m0, m1, l0, l1) per thread.
  static constexpr size_t kSplitPartBytes = (DVO / 8) * 128 * 16 + 128 * 16;
  static constexpr size_t kSplitSlotBytes = 128 + 2 * 2 * kSplitPartBytes;
  static_assert(DQK % 64 == 0 && DVO == 128, "the sm90 kernel covers Dqk in {128, 192}, Dvo = 128");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory budget");
  static_assert(kOffFlags + 8 <= kOffMaps, "flags before the tensor maps");
};

// Barrier slots inside the barrier area.
enum : int { kBarQFull = 0, kBarQEmpty = 1, kBarKFull = 2, kBarKEmpty = 4, kBarVFull = 6, kBarVEmpty = 8,
              kBarQBox1 = 10 };
// The barrier Q's box `c` completes on: all on kBarQFull unless MLAKIT_SM90_Q_PER_BOX.
__device__ __forceinline__ int q_box_bar(int c) { return (MLAKIT_SM90_Q_PER_BOX && c > 0) ? kBarQBox1 + c - 1 : kBarQFull; }

struct Sm90Params {
  CUtensorMap tm_q;   // [q_rows, H, Dqk]
  CUtensorMap tm_k;   // [kv_rows, Hkv, Dqk - k_rope_dim]
  CUtensorMap tm_kr;  // [kv_rows, Hkv, k_rope_dim] or rank 2 [kv_rows, k_rope_dim]; = tm_k without a rope part
  CUtensorMap tm_v;   // [kv_rows, Hkv, Dvo]
  CUtensorMap tm_o;   // [q_rows, H, Dvo], boxes of 64 rows (TMA-store epilogue); = tm_q unless o_tma
  PrefillArgs args;
  int kr_rank;        // 3 or 2 (one rope row shared by every kv head)
  int o_tma;          // 1: the epilogue stages O in shared memory and stores it with TMA
};

// One work item as the producer hands it to the consumers (through shared memory).
struct alignas(16) ItemPlan {
  WorkItem it;
  int rows;      // valid q rows of the tile
  int n_begin;   // first kv row walked (a multiple of BN)
  int n_tiles;   // kv tiles walked; 0 when no row of the tile sees a key
  int valid;     // 0: no more work for this block
  int chunk;     // -1: the tile's whole kv range; 0 / 1: a half of a split tile (plan/kv_split.h)
  int slot;      // chunk >= 0: the partial-result slot its two halves share
};
static_assert(sizeof(ItemPlan) == 48, "three 16-byte words");

template <int BM, int BN>
__device__ __forceinline__ ItemPlan plan_item(const ScheduleView& sched, const plan::ScheduleHeader& hdr, int w) {
  ItemPlan ip;
  ip.valid = 1;
  const RunWorkItem ri = sched.run_item(w, hdr.num_runs, hdr.head_group, BM);
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
  return ip;
}

// Named barriers (id 0 is __syncthreads). Work items travel scheduler warp -> producer warp ->
// consumer warpgroups through one shared-memory slot per hop, each hop a full/empty pair.
enum : int {
  kBarVClear = 1,   // the two consumer warpgroups, around clearing V rows past a sequence
  kBarConsFull = 2, kBarConsEmpty = 3,    // producer warp (32) <-> consumers (256)
  kBarSchedFull = 4, kBarSchedEmpty = 5,  // scheduler warp (32) <-> producer warp (32)
  kBarTurn0 = 6, kBarTurn1 = 7,           // consumer warpgroup 0 / 1 may issue (256: both)
  kBarSplit0 = 8,                         // + warpgroup: its 128 threads around a split arrival
  kBarOStage = 10,                        // both consumer warpgroups: past the last P V (its V stage is free)
  kBarOWritten0 = 11,                     // + warpgroup: its O rows are in shared memory
};
constexpr int kConsHop = 32 + 256;
constexpr int kSchedHop = 64;

// The hand-over slots live in this block's device scratch, not in shared memory: a global slot
// is as cheap for one item per tile, and it keeps compute-sanitizer's racecheck (which tracks
// shared memory and does not model bar.arrive -> bar.sync hand-overs) free of false reports.
// Loads and stores go to L2 (.cg), so no stale L1 line is ever read.
template <typename Shape>
__device__ __forceinline__ ItemPlan* item_slot(const PrefillArgs& a, int hop) {
  return reinterpret_cast<ItemPlan*>(static_cast<unsigned char*>(a.scratch) + Shape::kScratchFixed +
                                     blockIdx.x * Shape::kScratchPerBlock + Shape::kNumMaps * 128 +
                                     hop * Shape::kSlotBytes);
}
__device__ __forceinline__ void store_item(ItemPlan* slot, const ItemPlan& ip) {
  const int4* src = reinterpret_cast<const int4*>(&ip);
  int4* dst = reinterpret_cast<int4*>(slot);
  __stcg(dst + 0, src[0]);
  __stcg(dst + 1, src[1]);
  __stcg(dst + 2, src[2]);
}
__device__ __forceinline__ ItemPlan load_item(const ItemPlan* slot) {
  ItemPlan ip;
  int4* dst = reinterpret_cast<int4*>(&ip);
  const int4* src = reinterpret_cast<const int4*>(slot);
  dst[0] = __ldcg(src + 0);
  dst[1] = __ldcg(src + 1);
  dst[2] = __ldcg(src + 2);
  return ip;
}

// Warp 0 of warpgroup 0, all lanes: the per-block tensor maps with the plan's extents (see the
// file comment); lane 0 then acquires them for its TMA loads.
template <typename Shape>
__device__ __forceinline__ CUtensorMap* prepare_tensor_maps(const Sm90Params& p, uint32_t sbase, unsigned char* smem,
                                                            const plan::ScheduleHeader& hdr, int lane) {
  CUtensorMap* gmaps = reinterpret_cast<CUtensorMap*>(static_cast<unsigned char*>(p.args.scratch) +
                                                      Shape::kScratchFixed + blockIdx.x * Shape::kScratchPerBlock);
  const uint32_t smaps = sbase + Shape::kOffMaps;
  if (lane < 8) {  // 5 maps x 128 bytes = 8 lanes x 5 x 16 bytes
    uint4* dst = reinterpret_cast<uint4*>(smem + Shape::kOffMaps);
    dst[0 * 8 + lane] = reinterpret_cast<const uint4*>(&p.tm_q)[lane];
    dst[1 * 8 + lane] = reinterpret_cast<const uint4*>(&p.tm_k)[lane];
    dst[2 * 8 + lane] = reinterpret_cast<const uint4*>(&p.tm_kr)[lane];
    dst[3 * 8 + lane] = reinterpret_cast<const uint4*>(&p.tm_v)[lane];
    dst[4 * 8 + lane] = reinterpret_cast<const uint4*>(&p.tm_o)[lane];
  }
  __syncwarp();
  if (lane == 0) {
    const uint32_t tq = hdr.total_q > 0 ? hdr.total_q : 1;
    const uint32_t tkv = hdr.total_kv > 0 ? hdr.total_kv : 1;
    tensormap_set_extent_smem<2>(smaps + 0 * 128, tq);
    tensormap_set_extent_smem<2>(smaps + 1 * 128, tkv);
    if (p.kr_rank == 3) {
      tensormap_set_extent_smem<2>(smaps + 2 * 128, tkv);
    } else {
      tensormap_set_extent_smem<1>(smaps + 2 * 128, tkv);
    }
    tensormap_set_extent_smem<2>(smaps + 3 * 128, tkv);
    // The output's too: a graph captured with a short output view and replayed after a re-plan
    // with more rows must store them all (stores past the extent are dropped).
    tensormap_set_extent_smem<2>(smaps + 4 * 128, tq);
  }
  __syncwarp();
#pragma unroll
  for (int m = 0; m < Shape::kNumMaps; ++m) tensormap_publish(&gmaps[m], smaps + m * 128);
  if (lane == 0) {  // the producer's loads; the consumers acquire the output map themselves
#pragma unroll
    for (int m = 0; m < 4; ++m) tensormap_acquire(&gmaps[m]);
  }
  return gmaps;
}

// Warp 1 of warpgroup 0: dynamic scheduling. The first item is blockIdx.x, then whatever the
// counter hands out, so a block that drew short items takes more of them; each is decoded (a
// binary search over the plan's runs) one item ahead of the producer, off its critical path.
template <typename Shape>
__device__ __forceinline__ void scheduler_warp(const Sm90Params& p, const ScheduleView& sched,
                                               const plan::ScheduleHeader& hdr, int lane) {
  int* next_item = static_cast<int*>(p.args.scratch);  // items handed out beyond the first grid
  int* blocks_done = next_item + 1;
  ItemPlan* slot = item_slot<Shape>(p.args, 0);
  int w = blockIdx.x;
  while (true) {
    ItemPlan ip{};  // valid = 0: no more work
    if (w < hdr.num_items) ip = plan_item<Shape::BM, Shape::BN>(sched, hdr, w);
    named_barrier_sync<kBarSchedEmpty, kSchedHop>();
    if (lane == 0) store_item(slot, ip);
    __syncwarp();
    named_barrier_arrive<kBarSchedFull, kSchedHop>();
    if (!ip.valid) break;
    int next = 0;
    if (lane == 0) next = atomicAdd(next_item, 1);
    w = __shfl_sync(0xffffffffu, next, 0) + static_cast<int>(gridDim.x);
  }
  // No item left for this block (PDL, docs/pdl.md): the next kernel's blocks may be scheduled
  // as SMs free up; they still wait for this whole grid before touching memory.
  pdl_launch_dependents();
  named_barrier_sync<kBarSchedEmpty, kSchedHop>();  // the producer's last "read"
  // The last block out leaves the counters zero for the next launch (or graph replay).
  if (lane == 0) {
    __threadfence();
    if (atomicAdd(blocks_done, 1) == static_cast<int>(gridDim.x) - 1) {
      atomicExch(next_item, 0);
      atomicExch(blocks_done, 0);
    }
  }
}

// Warp 0 of warpgroup 0 (lane 0 issues): TMA loads of Q once per item, then K one tile ahead of V
// (the consumers need K_{t+1} and V_t together), each into a two-stage ring guarded by mbarriers.
template <typename Shape>
__device__ __forceinline__ void producer_warp(const Sm90Params& p, uint32_t sbase,
                                              const CUtensorMap* gmaps, int lane) {
  constexpr int BN = Shape::BN;
  const PrefillArgs& a = p.args;
  const int group = a.num_qo_heads / a.num_kv_heads;
  const int nope_cols = Shape::DQK - a.k_rope_dim;  // columns of K that come from `k`
  auto bar = [&](int i) { return sbase + Shape::kOffBars + 8 * i; };
  const ItemPlan* from_sched = item_slot<Shape>(a, 0);
  ItemPlan* to_cons = item_slot<Shape>(a, 1);

  named_barrier_arrive<kBarSchedEmpty, kSchedHop>();  // the scheduler's first slot is free
  uint32_t q_iter = 0, kv_iter = 0;
  while (true) {
    named_barrier_sync<kBarSchedFull, kSchedHop>();
    const ItemPlan ip = load_item(from_sched);
    named_barrier_arrive<kBarSchedEmpty, kSchedHop>();
    named_barrier_sync<kBarConsEmpty, kConsHop>();
    if (lane == 0) store_item(to_cons, ip);
    __syncwarp();
    named_barrier_arrive<kBarConsFull, kConsHop>();
    if (!ip.valid) break;
    if (ip.n_tiles == 0) continue;  // rows with no key: nothing to load
    const int kv_head = ip.it.head / group;

    if (lane == 0) {
      auto load_q = [&] {
        if (MLAKIT_SM90_EXP_Q_ONCE && q_iter > 0) return;
        mbar_wait(bar(kBarQEmpty), (q_iter & 1) ^ 1);
#if MLAKIT_SM90_Q_PER_BOX
#pragma unroll
        for (int c = 0; c < Shape::kQBoxes; ++c) mbar_arrive_expect_tx(bar(q_box_bar(c)), Shape::kBoxBytesQ);
#else
        mbar_arrive_expect_tx(bar(kBarQFull), Shape::kQBytes);
#endif
#pragma unroll
        for (int c = 0; c < Shape::kQBoxes; ++c) {
          tma_load_3d(sbase + Shape::kOffQ + c * Shape::kBoxBytesQ, &gmaps[0], bar(q_box_bar(c)), c * 64,
                      ip.it.head, ip.it.q_begin + ip.it.row0);
        }
      };
      auto load_k = [&](int t) {
        const uint32_t i = kv_iter + t;
        const int s = i & 1;
        const int row = ip.it.kv_begin + ip.n_begin + t * BN;
        mbar_wait(bar(kBarKEmpty + s), ((i >> 1) & 1) ^ 1);
        mbar_arrive_expect_tx(bar(kBarKFull + s), Shape::kKBytes);
        const uint32_t sk = sbase + Shape::kOffK + s * Shape::kKBytes;
#pragma unroll
        for (int c = 0; c < Shape::kQBoxes; ++c) {
          const int col = c * 64;
          if (col < nope_cols) {
            tma_load_3d(sk + c * Shape::kBoxBytesKV, &gmaps[1], bar(kBarKFull + s), col, kv_head, row);
          } else if (p.kr_rank == 3) {
            tma_load_3d(sk + c * Shape::kBoxBytesKV, &gmaps[2], bar(kBarKFull + s), col - nope_cols, kv_head, row);
          } else {
            tma_load_2d(sk + c * Shape::kBoxBytesKV, &gmaps[2], bar(kBarKFull + s), col - nope_cols, row);
          }
        }
      };
      auto load_v = [&](int t) {
        const uint32_t i = kv_iter + t;
        const int s = i & 1;
        const int row = ip.it.kv_begin + ip.n_begin + t * BN;
        mbar_wait(bar(kBarVEmpty + s), ((i >> 1) & 1) ^ 1);
        mbar_arrive_expect_tx(bar(kBarVFull + s), Shape::kVBytes);
        const uint32_t sv = sbase + Shape::kOffV + s * Shape::kVBytes;
#pragma unroll
        for (int c = 0; c < Shape::kVBoxes; ++c) {
          tma_load_3d(sv + c * Shape::kBoxBytesKV, &gmaps[3], bar(kBarVFull + s), c * 64, kv_head, row);
        }
      };
#if MLAKIT_SM90_K0_FIRST
      load_k(0);
      load_q();
#else
      load_q();
#if MLAKIT_SM90_K_AHEAD
      load_k(0);
#endif
#endif
#if MLAKIT_SM90_K_AHEAD
      for (int t = 0; t < ip.n_tiles; ++t) {
        if (t + 1 < ip.n_tiles) load_k(t + 1);
        load_v(t);
      }
#else
      for (int t = 0; t < ip.n_tiles; ++t) {
        if (t > 0 || !MLAKIT_SM90_K0_FIRST) load_k(t);
        load_v(t);
      }
#endif
    }
    ++q_iter;
    kv_iter += ip.n_tiles;
    __syncwarp();
  }
  named_barrier_sync<kBarConsEmpty, kConsHop>();  // the consumers' last "read"
}

// S (this warpgroup's 64 rows x 128 keys) = Q K^T over Dqk, from the swizzled shared tiles.
template <typename T, typename Shape>
__device__ __forceinline__ void issue_qk(float (&s)[64], uint32_t q_rows_base, uint32_t k_stage) {
#pragma unroll
  for (int kk = 0; kk < Shape::DQK / 16; ++kk) {
    const int box = kk / 4;
    const uint32_t k_off = (kk % 4) * 32;  // 16 columns of 2 bytes inside the 128-byte swizzled row
    const uint64_t da = smem_desc_sw128(q_rows_base + box * Shape::kBoxBytesQ + k_off, 16, 1024);
    const uint64_t db = smem_desc_sw128(k_stage + box * Shape::kBoxBytesKV + k_off, 16, 1024);
    wgmma_m64n128k16_ss<T>(s, da, db, kk > 0 ? 1 : 0);
  }
}

// The same for an item's first kv tile with Q arriving box by box (MLAKIT_SM90_Q_PER_BOX): each
// box's k-steps issue once that box has landed.
template <typename T, typename Shape>
__device__ __forceinline__ void issue_qk_first(float (&s)[64], uint32_t q_rows_base, uint32_t k_stage,
                                               uint32_t bars, uint32_t q_parity) {
#pragma unroll
  for (int kk = 0; kk < Shape::DQK / 16; ++kk) {
    const int box = kk / 4;
    if (kk % 4 == 0) mbar_wait(bars + 8 * q_box_bar(box), q_parity);
    const uint32_t k_off = (kk % 4) * 32;
    const uint64_t da = smem_desc_sw128(q_rows_base + box * Shape::kBoxBytesQ + k_off, 16, 1024);
    const uint64_t db = smem_desc_sw128(k_stage + box * Shape::kBoxBytesKV + k_off, 16, 1024);
    wgmma_m64n128k16_ss<T>(s, da, db, kk > 0 ? 1 : 0);
  }
}

// O (64 rows x 128 value columns) += P V, P from registers (kk-th 16 keys in p[kk]).
template <typename T, typename Shape>
__device__ __forceinline__ void issue_pv(float (&o)[64], const uint32_t (&p)[Shape::BN / 16][4], uint32_t v_stage) {
#pragma unroll
  for (int kk = 0; kk < Shape::BN / 16; ++kk) {
    // Keys 16kk..16kk+15 start 16 rows (2048 bytes) further; the next 64 value columns live in
    // the next TMA box (LBO), the next 8 keys 1024 bytes on (SBO).
    const uint64_t db = smem_desc_sw128(v_stage + kk * 16 * 128, Shape::kBoxBytesKV, 1024);
    wgmma_m64n128k16_rs_mnb<T>(o, p[kk], db, 1);
  }
}

// Probabilities (fp32, in the S accumulator layout) -> the A-operand fragments of P V.
template <typename T, int BN>
__device__ __forceinline__ void pack_p(uint32_t (&p)[BN / 16][4], const float (&s)[BN / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    p[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    p[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    p[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    p[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

template <int BN>
__device__ __forceinline__ void softmax_step(RowSoftmax<BN / 8>& sm, float (&s)[BN / 8][4], float (&alpha)[2],
                                             const ScoreTransform& tf, const rule::MaskRule<int>& mr,
                                             const int (&row)[2], int col0, bool full, int lane) {
  if (tf.capped()) {
    if (full) sm.template update<false, true>(s, alpha, tf, mr, row, col0, lane);
    else sm.template update<true, true>(s, alpha, tf, mr, row, col0, lane);
  } else {
    if (full) sm.template update<false, false>(s, alpha, tf, mr, row, col0, lane);
    else sm.template update<true, false>(s, alpha, tf, mr, row, col0, lane);
  }
}

// The issue turn of consumer warpgroup `cw` (MLAKIT_SM90_PINGPONG): wait for it, pass it on.
__device__ __forceinline__ void turn_wait(int cw) {
#if MLAKIT_SM90_PINGPONG
  if (cw == 0) named_barrier_sync<kBarTurn0, 256>();
  else named_barrier_sync<kBarTurn1, 256>();
#endif
}
__device__ __forceinline__ void turn_pass(int cw) {
#if MLAKIT_SM90_PINGPONG
  if (cw == 0) named_barrier_arrive<kBarTurn1, 256>();
  else named_barrier_arrive<kBarTurn0, 256>();
#endif
}

template <int ID>
__device__ __forceinline__ void split_barrier(int cw) {
  if (cw == 0) named_barrier_sync<ID, 128>();
  else named_barrier_sync<ID + 1, 128>();
}

// The epilogue of one half of a split tile (plan/kv_split.h), for this warpgroup's 64 rows. Each
// half publishes its unnormalized state (O, m, l: exact fp32) in its own part of the slot, then
// counts its arrival; the second to arrive merges the two with half 0 always the first operand
// (explicit roundings, no contraction), so the bits do not depend on which half finished first,
// writes the output and LSE, and resets the counter for the next launch (or graph replay).
template <typename Shape, typename T>
__device__ __forceinline__ void split_epilogue(float (&o)[Shape::DVO / 8][4], const float (&m)[2],
                                               const float (&l)[2], const ItemPlan& ip, const PrefillArgs& a,
                                               unsigned char* smem, int cw, int tid, T* out_tile, float* lse_tile,
                                               int64_t o_stride, int64_t lse_stride, int warp_row0, int lane) {
  constexpr int NT = Shape::DVO / 8;
  unsigned char* slot = static_cast<unsigned char*>(a.scratch) +
                        split_region_offset(Shape::kScratchFixed, Shape::kScratchPerBlock, gridDim.x) +
                        static_cast<size_t>(ip.slot) * Shape::kSplitSlotBytes;
  int* counter = reinterpret_cast<int*>(slot) + cw;
  auto part = [&](int chunk) {
    return reinterpret_cast<float4*>(slot + 128 + (chunk * 2 + cw) * Shape::kSplitPartBytes);
  };
  float4* mine = part(ip.chunk);
#pragma unroll
  for (int n = 0; n < NT; ++n) __stcg(mine + n * 128 + tid, make_float4(o[n][0], o[n][1], o[n][2], o[n][3]));
  __stcg(mine + NT * 128 + tid, make_float4(m[0], m[1], l[0], l[1]));
  __threadfence();  // the state is visible before the arrival is
  split_barrier<kBarSplit0>(cw);
  volatile int* flag = reinterpret_cast<volatile int*>(smem + Shape::kOffFlags) + cw;
  if (tid == 0) *flag = atomicAdd(counter, 1);
  split_barrier<kBarSplit0>(cw);
  if (*flag == 0) return;  // the other half is still running: it merges
  __threadfence();  // acquire: the other half's state, published before its arrival
  const float4* other = part(ip.chunk ^ 1);
  const float4 oml = __ldcg(other + NT * 128 + tid);
  const bool first = ip.chunk == 0;  // this thread holds half 0
  const float m0[2] = {first ? m[0] : oml.x, first ? m[1] : oml.y};
  const float m1[2] = {first ? oml.x : m[0], first ? oml.y : m[1]};
  const float l0[2] = {first ? l[0] : oml.z, first ? l[1] : oml.w};
  const float l1[2] = {first ? oml.z : l[0], first ? oml.w : l[1]};
  float mm[2], ll[2], w0[2], w1[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mm[r] = fmaxf(m0[r], m1[r]);
    const bool none = mm[r] == -INFINITY;  // neither half saw a key of this row
    w0[r] = none ? 0.f : fast_exp2(m0[r] - mm[r]);
    w1[r] = none ? 0.f : fast_exp2(m1[r] - mm[r]);
    ll[r] = __fadd_rn(__fmul_rn(l0[r], w0[r]), __fmul_rn(l1[r], w1[r]));
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const float4 v = __ldcg(other + n * 128 + tid);
    const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float a0 = first ? o[n][e] : x[e];
      const float a1 = first ? x[e] : o[n][e];
      o[n][e] = __fadd_rn(__fmul_rn(a0, w0[e >> 1]), __fmul_rn(a1, w1[e >> 1]));
    }
  }
  store_rows<Shape::DVO>(o, mm, ll, out_tile, o_stride, lse_tile, lse_stride, warp_row0, ip.rows, lane);
  if (tid == 0) atomicExch(counter, 0);
}

// The TMA-store epilogue of this warpgroup's 64 rows (all inside the sequence). Normalized O goes
// into the V stage the item's last P V read (the caller has met the other warpgroup past that
// P V), laid out as two 128-byte-swizzled boxes of 64 columns, the layout the output tensor map
// describes; stmatrix writes the accumulator fragments conflict-free. Thread 0 then stores both
// boxes; it must wait for their reads (tma_store_wait_read) before the stage is refilled.
template <typename Shape, typename T>
__device__ __forceinline__ void stage_and_store_o(const float (&o)[Shape::DVO / 8][4], const float (&l)[2],
                                                  uint32_t stage, const CUtensorMap* tm_o, int cw, int warp,
                                                  int lane, int tid, int head, int row_global) {
  static_assert(Shape::BM <= Shape::BN && Shape::kVBoxes * 64 == Shape::DVO, "O fits one V stage");
  const float inv[2] = {l[0] > 0.f ? 1.f / l[0] : 0.f, l[1] > 0.f ? 1.f / l[1] : 0.f};
  const int j = lane >> 3;                                         // the 8x8 matrix this lane addresses
  const int r = cw * 64 + warp * 16 + (lane & 7) + 8 * (j & 1);    // its row inside the tile
#pragma unroll
  for (int n = 0; n < Shape::DVO / 8; n += 2) {
    const int chunk = n + (j >> 1);  // 16-byte column chunk
    const uint32_t addr = stage + (chunk >> 3) * Shape::kBoxBytesKV + r * 128 + (((chunk & 7) ^ (r & 7)) << 4);
    stmatrix_x4(addr, pack2<T>(o[n][0] * inv[0], o[n][1] * inv[0]), pack2<T>(o[n][2] * inv[1], o[n][3] * inv[1]),
                pack2<T>(o[n + 1][0] * inv[0], o[n + 1][1] * inv[0]),
                pack2<T>(o[n + 1][2] * inv[1], o[n + 1][3] * inv[1]));
  }
  fence_proxy_async_smem();
  if (cw == 0) named_barrier_sync<kBarOWritten0, 128>();
  else named_barrier_sync<kBarOWritten0 + 1, 128>();
  if (tid == 0) {
#pragma unroll
    for (int c = 0; c < Shape::kVBoxes; ++c) {
      tma_store_3d(tm_o, stage + c * Shape::kBoxBytesKV + cw * 64 * 128, c * 64, head, row_global);
    }
    tma_store_commit();
  }
}

// Warpgroups 1 and 2: 64 query rows each of the item the producer hands over.
template <typename T, typename Shape>
__device__ __forceinline__ void consumer(const Sm90Params& p, uint32_t sbase, unsigned char* smem,
                                         const plan::ScheduleHeader& hdr, int cw) {
  constexpr int BN = Shape::BN, DVO = Shape::DVO;
  const PrefillArgs& a = p.args;
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const ScoreTransform tf = ScoreTransform::from(hdr);
  auto bar = [&](int i) { return sbase + Shape::kOffBars + 8 * i; };
  const uint32_t q_rows_base = sbase + Shape::kOffQ + cw * 64 * 128;  // this warpgroup's 64 rows
  const int warp_row0 = cw * 64 + warp * 16;                          // inside the tile
  const ItemPlan* slot = item_slot<Shape>(a, 1);

  // Takes the next item from the producer. Called for item i + 1 before item i's last P V (or
  // its epilogue, when it has no kv tile), so the slot's L2 round trip overlaps that work.
  auto next_item = [&] {
    named_barrier_sync<kBarConsFull, kConsHop>();
    const ItemPlan ip = load_item(slot);
    named_barrier_arrive<kBarConsEmpty, kConsHop>();
    return ip;
  };
  named_barrier_arrive<kBarConsEmpty, kConsHop>();  // the producer's first slot is free
  if (cw == 1) turn_pass(1);                        // warpgroup 0 issues first
  T* o_all = static_cast<T*>(a.out);
  uint32_t q_iter = 0, kv_iter = 0;
  // TMA-store epilogue: thread 0 of the warpgroup owes the V stage its stores read an arrival
  // (for its warp) once those reads are done; it pays it after the next item's first S issue,
  // so the wait is off the path.
  const bool o_tma = p.o_tma != 0;
  int owed_stage = -1;  // -1: nothing owed
  auto pay_v = [&] {
    if (owed_stage >= 0) {
      tma_store_wait_read();
      mbar_arrive(bar(kBarVEmpty + owed_stage));
      owed_stage = -1;
    }
  };
  ItemPlan upcoming = next_item();
  // The producer warp published this block's tensor maps before it handed over the first item.
  const CUtensorMap* tm_o = reinterpret_cast<const CUtensorMap*>(static_cast<unsigned char*>(a.scratch) +
                                                                 Shape::kScratchFixed +
                                                                 blockIdx.x * Shape::kScratchPerBlock) +
                            4;
  if (tid == 0 && o_tma) tensormap_acquire(tm_o);
  while (upcoming.valid) {
    const ItemPlan ip = upcoming;
    const WorkItem& it = ip.it;
    const rule::MaskRule<int> mr{it.lq, it.lk, hdr.causal != 0, hdr.window_left};
    const int row_in_seq[2] = {it.row0 + warp_row0 + lane / 4, it.row0 + warp_row0 + lane / 4 + 8};

    float o[DVO / 8][4];
#pragma unroll
    for (int n = 0; n < DVO / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    RowSoftmax<BN / 8> sm;
    sm.init();

    bool fetched = false;  // `upcoming` already holds the next item
    if (ip.n_tiles > 0) {
      float s[BN / 8][4];
      uint32_t pf[BN / 16][4];
      float alpha[2];
      float(&s_flat)[64] = reinterpret_cast<float(&)[64]>(s);
      float(&o_flat)[64] = reinterpret_cast<float(&)[64]>(o);
      uint32_t(&pf_flat)[BN / 4] = reinterpret_cast<uint32_t(&)[BN / 4]>(pf);

      const uint32_t q_parity = q_iter & 1;
      if (!MLAKIT_SM90_Q_PER_BOX && (!MLAKIT_SM90_EXP_Q_ONCE || q_iter == 0)) mbar_wait(bar(kBarQFull), q_parity);
      ++q_iter;

      // kv tile 0: S, softmax, P.
      uint32_t stage = kv_iter & 1, parity = (kv_iter >> 1) & 1;
      mbar_wait(bar(kBarKFull + stage), parity);
      turn_wait(cw);
      wgmma_fence();
#if MLAKIT_SM90_Q_PER_BOX
      issue_qk_first<T, Shape>(s_flat, q_rows_base, sbase + Shape::kOffK + stage * Shape::kKBytes,
                               sbase + Shape::kOffBars, q_parity);
#else
      issue_qk<T, Shape>(s_flat, q_rows_base, sbase + Shape::kOffK + stage * Shape::kKBytes);
#endif
      wgmma_commit();
      turn_pass(cw);
      if (tid == 0) pay_v();
      wgmma_wait<0>();
      fence_regs(s_flat);
      if (lane == 0) {
        mbar_arrive(bar(kBarKEmpty + stage));
        if (ip.n_tiles == 1) mbar_arrive(bar(kBarQEmpty));
      }
      int n0 = ip.n_begin;
      softmax_step<BN>(sm, s, alpha, tf, mr, row_in_seq, n0, mr.all_visible(it.row0 + cw * 64, 64, n0, BN), lane);
      pack_p<T, BN>(pf, s);

      for (int t = 1; t < ip.n_tiles; ++t) {
        const uint32_t prev_stage = stage, prev_parity = parity;
        ++kv_iter;
        stage = kv_iter & 1;
        parity = (kv_iter >> 1) & 1;
        n0 += BN;
        // Issue S_t = Q K_t^T; while it runs, rescale O by the last softmax's factor (FA3's order:
        // off the path between P V's completion and the next S); then O += P_{t-1} V_{t-1}.
        // The softmax of S_t overlaps the P V.
        mbar_wait(bar(kBarKFull + stage), parity);
#if !MLAKIT_SM90_K_AHEAD
        mbar_wait(bar(kBarVFull + prev_stage), prev_parity);
#endif
        turn_wait(cw);
        wgmma_fence();
        issue_qk<T, Shape>(s_flat, q_rows_base, sbase + Shape::kOffK + stage * Shape::kKBytes);
        wgmma_commit();
#if MLAKIT_SM90_RESCALE_EARLY
        rescale_rows(o, alpha);
#endif
#if MLAKIT_SM90_K_AHEAD
        mbar_wait(bar(kBarVFull + prev_stage), prev_parity);  // V_{t-1} is loaded after K_t
#endif
#if MLAKIT_SM90_RESCALE_EARLY
        wgmma_fence();  // O was just written by ordinary instructions
#endif
        issue_pv<T, Shape>(o_flat, pf, sbase + Shape::kOffV + prev_stage * Shape::kVBytes);
        wgmma_commit();
        turn_pass(cw);
        wgmma_wait<1>();
        fence_regs(s_flat);
        if (lane == 0) {
          mbar_arrive(bar(kBarKEmpty + stage));
          if (t == ip.n_tiles - 1) mbar_arrive(bar(kBarQEmpty));
        }
#if MLAKIT_SM90_SOFTMAX_AFTER_PV
        wgmma_wait<0>();
        fence_regs(o_flat);
        fence_regs(pf_flat);
        if (lane == 0) mbar_arrive(bar(kBarVEmpty + prev_stage));
#endif
        softmax_step<BN>(sm, s, alpha, tf, mr, row_in_seq, n0, mr.all_visible(it.row0 + cw * 64, 64, n0, BN),
                         lane);
#if !MLAKIT_SM90_SOFTMAX_AFTER_PV
        wgmma_wait<0>();
        fence_regs(o_flat);
        fence_regs(pf_flat);  // P was read asynchronously until here: keep it live
        if (lane == 0) mbar_arrive(bar(kBarVEmpty + prev_stage));
#endif
#if !MLAKIT_SM90_RESCALE_EARLY
        rescale_rows(o, alpha);
#endif
        pack_p<T, BN>(pf, s);
      }

      // The last tile's P V. V rows past the sequence end hold whatever follows it (or TMA's
      // zeros): P is 0 there, but 0 * inf would be NaN, so zero them first (both warpgroups
      // share the stage; each clears half, then they meet at a named barrier).
      mbar_wait(bar(kBarVFull + stage), parity);
      // The next item, now: the producer handed it over once it had issued this item's last
      // load (which has landed), and the slot's L2 round trip then overlaps the last P V.
      upcoming = next_item();
      fetched = true;
      const int valid = it.lk - n0;
      if (valid < BN) {
        const int ctid = threadIdx.x - 128;  // 0..255 over both consumer warpgroups
        const int chunks = (BN - valid) * Shape::kVBoxes * 8;  // 16-byte chunks to clear
        unsigned char* sv = smem + Shape::kOffV + stage * Shape::kVBytes;
        for (int c = ctid; c < chunks; c += 256) {
          const int row = valid + c / (Shape::kVBoxes * 8);
          const int rem = c % (Shape::kVBoxes * 8);
          *reinterpret_cast<uint4*>(sv + (rem / 8) * Shape::kBoxBytesKV + row * 128 + (rem % 8) * 16) =
              make_uint4(0, 0, 0, 0);
        }
        fence_proxy_async_smem();
        named_barrier_sync<kBarVClear, 256>();
      }
#if MLAKIT_SM90_RESCALE_EARLY
      rescale_rows(o, alpha);
#endif
      turn_wait(cw);
      wgmma_fence();
      issue_pv<T, Shape>(o_flat, pf, sbase + Shape::kOffV + stage * Shape::kVBytes);
      wgmma_commit();
      turn_pass(cw);
      wgmma_wait<0>();
      fence_regs(o_flat);
      fence_regs(pf_flat);
      // With the TMA-store epilogue, warp 0's arrival waits for the stores that read this stage.
      if (lane == 0 && !(o_tma && ip.chunk < 0 && warp == 0)) mbar_arrive(bar(kBarVEmpty + stage));
      ++kv_iter;
    }

    if (!fetched) upcoming = next_item();
    // Epilogue (also for tiles whose rows see no key: out = 0, lse = -inf).
    float l_total[2];
    sm.finish(l_total);
    T* out_tile = o_all + static_cast<int64_t>(it.q_begin + it.row0) * a.o_stride_tok +
                  static_cast<int64_t>(it.head) * a.o_stride_head;
    float* lse_tile = a.lse == nullptr ? nullptr
                                       : a.lse + static_cast<int64_t>(it.q_begin + it.row0) * a.lse_stride_tok +
                                             static_cast<int64_t>(it.head) * a.lse_stride_head;
    if (ip.chunk >= 0) {
      split_epilogue<Shape>(o, sm.m, l_total, ip, a, smem, cw, tid, out_tile, lse_tile, a.o_stride_tok,
                            a.lse_stride_tok, warp_row0, lane);
    } else if (o_tma && ip.n_tiles > 0) {
      named_barrier_sync<kBarOStage, 256>();  // both warpgroups' last P V has read the stage
      const uint32_t last_stage = (kv_iter - 1) & 1;  // the V stage of the item's last P V
      if (ip.rows >= (cw + 1) * 64) {
        stage_and_store_o<Shape, T>(o, l_total, sbase + Shape::kOffV + last_stage * Shape::kVBytes, tm_o, cw,
                                    warp, lane, tid, it.head, it.q_begin + it.row0 + cw * 64);
        store_lse_rows(sm.m, l_total, lse_tile, a.lse_stride_tok, warp_row0, ip.rows, lane);
        if (tid == 0) owed_stage = static_cast<int>(last_stage);
      } else {  // the sequence ends inside these rows: a box would write the next sequence's
        store_rows<DVO>(o, sm.m, l_total, out_tile, a.o_stride_tok, lse_tile, a.lse_stride_tok, warp_row0,
                        ip.rows, lane);
        if (tid == 0) mbar_arrive(bar(kBarVEmpty + last_stage));
      }
    } else if (!MLAKIT_SM90_EXP_NO_STORE) {
      store_rows<DVO>(o, sm.m, l_total, out_tile, a.o_stride_tok, lse_tile, a.lse_stride_tok, warp_row0, ip.rows,
                      lane);
    }
  }
  if (tid == 0) {
    pay_v();
    tma_store_wait_all();  // the output is written before the block exits
  }
  if (cw == 0) turn_wait(0);  // takes warpgroup 1's last pass, so no barrier is left half-arrived
}

template <typename T, typename Shape>
__global__ void __launch_bounds__(Shape::kThreads, 1) prefill_sm90_kernel(const __grid_constant__ Sm90Params p) {
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzle atoms are 1024 bytes and the swizzle follows address bits, so the tiles
  // start on a 1024-byte boundary.
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - raw);

  // PDL (docs/pdl.md): from here on every thread reads what the previous kernel may write (the
  // schedule, q/k/v) or writes what it may still read (scratch, out), so all wait for it first.
  pdl_wait();
  const ScheduleView sched = ScheduleView::from(p.args);
  const plan::ScheduleHeader hdr = *sched.header;
  // Broadcast from lane 0 so the compiler knows the warpgroup index is warp-uniform: the wgmma
  // descriptors derived from it then live in uniform registers (no R2UR per wgmma, no spills).
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);

  if (threadIdx.x == 0) {
    // The plan must have been built for this kernel's tile, or rows would be skipped or repeated.
    if (hdr.block_m != Shape::BM || hdr.block_n != Shape::BN) __trap();
    const uint32_t bars = sbase + Shape::kOffBars;
    mbar_init(bars + 8 * kBarQFull, 1);
    mbar_init(bars + 8 * kBarQBox1, 1);
    mbar_init(bars + 8 * (kBarQBox1 + 1), 1);
    mbar_init(bars + 8 * kBarQEmpty, Shape::kConsumerWarps);
    for (int s = 0; s < Shape::kStages; ++s) {
      mbar_init(bars + 8 * (kBarKFull + s), 1);
      mbar_init(bars + 8 * (kBarKEmpty + s), Shape::kConsumerWarps);
      mbar_init(bars + 8 * (kBarVFull + s), 1);
      mbar_init(bars + 8 * (kBarVEmpty + s), Shape::kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();

  // Register split (64512 = 128 x 40 + 256 x 232): the producer loop fits 40 without spills,
  // and the consumers' main loop (O, S, P = 160 live registers) fits 232 without spills
  // (24 / 240 made the producer spill; checked in the SASS).
  if (wg == 0) {
    setmaxnreg_dec<40>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0) {
      const CUtensorMap* gmaps = prepare_tensor_maps<Shape>(p, sbase, smem, hdr, lane);
      producer_warp<Shape>(p, sbase, gmaps, lane);
    } else if (warp == 1) {
      scheduler_warp<Shape>(p, sched, hdr, lane);
    }
  } else {
    setmaxnreg_inc<232>();
    consumer<T, Shape>(p, sbase, smem, hdr, wg - 1);
  }
}

// Host side (prefill_launch_sm90.cuh): builds the tensor maps and launches.
template <typename T, int DQK, int DVO>
void launch_prefill_sm90(const PrefillArgs& args, int grid_blocks, cudaStream_t stream);
template <typename T, int DQK, int DVO>
int blocks_per_sm_sm90();

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
