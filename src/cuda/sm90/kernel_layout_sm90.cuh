// What the sm90 kernel's warps share: the element types, the tile shape and shared-memory layout,
// the mbarrier and named-barrier ids, the launch parameters and the work item handed from warp to
// warp.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/work_scheduler.cuh"
#include "contract/prefill_launch.h"
#include "cuda/sm90/kernel_options_sm90.cuh"
#include "cuda/sm90/ptx_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

// The element types of one kernel: q, k, v (bf16, fp16 or e4m3) and the output (16-bit). The FP8
// kernel is the same kernel with another operand layout and instruction: its wgmma has k = 32
// and K-major operands only, so V is transposed in shared memory (vtranspose_sm90.cuh) and P is
// packed to e4m3 in the operand layout that transpose matches (mainloop_sm90.cuh).
template <typename In, typename Out = In>
struct Sm90Elems {
  using TIn = In;
  using TOut = Out;
  static constexpr bool kFp8 = sizeof(In) == 1;
  // P = 2^(score - row max + kPLog2Offset): in (0, 256] for e4m3 (largest finite 448), so small
  // probabilities keep e4m3's normal range instead of flushing through its subnormals (2^-9);
  // the row sum carries the same factor, so O / l cancels it and the LSE subtracts it
  // (FlashAttention-3's Max_offset). 0 for 16-bit P.
  static constexpr int kPLog2Offset = kFp8 ? 8 : 0;
  // The softmax's reference max moves only past 2^kSoftmaxSlack (online_softmax.cuh), so most
  // tiles skip rescaling O. 16-bit P holds values up to 2^8 exactly as well as below 1; e4m3 P
  // has no such headroom above its offset.
  static constexpr int kSoftmaxSlack = kFp8 ? 0 : 8;
};

template <int DQK_, int DVO_, int kInBytes_ = 2>
struct Sm90Shape {
  static constexpr int DQK = DQK_;
  static constexpr int DVO = DVO_;
  // Input element size: 2 (bf16 / fp16) or 1 (e4m3). TMA boxes are always 64 elements wide, so
  // the tiles have the same boxes in both: 128-byte rows, 128-byte swizzle for 16-bit elements,
  // 64-byte rows, 64-byte swizzle for e4m3.
  static constexpr int kInBytes = kInBytes_;
  static constexpr bool kFp8 = kInBytes == 1;
  static constexpr int kRowBytes = 64 * kInBytes;  // one row of a 64-column box
  static constexpr int kMmaK = 32 / kInBytes;      // k of one wgmma: 16, or 32 for e4m3
  static constexpr int kKStepsPerBox = 64 / kMmaK;
  static constexpr int kPvSteps = 128 / kMmaK;     // wgmmas of one P V (BN keys)
  static constexpr int BM = 128;  // q rows per tile (two consumer warpgroups x 64)
  static constexpr int kWgRows = 64;  // q rows of one consumer warpgroup
  static constexpr int BN = 128;  // keys per kv tile
  static constexpr int kStages = 2;
  static constexpr int kThreads = 384;
  static constexpr int kConsumerWarps = 8;
  static constexpr int kQBoxes = DQK / 64;  // TMA boxes are 64 columns (128 bytes) wide
  static constexpr int kVBoxes = DVO / 64;
  static constexpr int kBoxBytesQ = BM * kRowBytes;  // one 64-column box of the whole tile's Q
  static constexpr int kBoxBytesKV = BN * kRowBytes;
  static constexpr int kQBytes = kQBoxes * kBoxBytesQ;
  static constexpr int kKBytes = kQBoxes * kBoxBytesKV;  // one stage
  static constexpr int kVBytes = kVBoxes * kBoxBytesKV;  // one stage
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKBytes;
  // Q is loaded per consumer warpgroup: boxes of its 64 rows, each landing where the second half
  // of a 128-row box would (a 64-row box at + 64 rows), so the wgmma descriptors see one Q tile.
  static constexpr int kQBoxRows = kWgRows;
  static constexpr int kQHalfBytes = kQBoxes * kWgRows * kRowBytes;  // one warpgroup's rows of Q
  // e4m3: V transposed per stage, [DVO rows][BN keys] (K-major for P V's wgmma), one 128-byte
  // swizzled box of 128 keys per value column (vtranspose_sm90.cuh); none for 16-bit V.
  static constexpr int kVtBytes = kFp8 ? DVO * BN : 0;
  static constexpr int kOffVt = kOffV + kStages * kVBytes;
  // Per consumer warpgroup one 64 x 64 output box (16-bit) staged for its TMA store.
  static constexpr int kOStageBytes = kWgRows * 128;
  static constexpr int kOffOStage = kOffVt + kStages * kVtBytes;
  static constexpr int kOffBars = kOffOStage + 2 * kOStageBytes;
  // Q full / empty of warpgroup 0's half, K and V full / empty per stage, warpgroup 1's Q full /
  // empty, the V-cleared barrier per stage; e4m3: the transposed V's full / empty per stage.
  static constexpr int kNumBars = 2 + 4 * kStages + 2 + kStages + (kFp8 ? 2 * kStages : 0);
  static constexpr int kOffFlags = kOffBars + kNumBars * 8;  // int per consumer warpgroup (split merge)
  static constexpr int kFlagBytes = 8;
  static constexpr int kOffMaps = (kOffFlags + kFlagBytes + 127) / 128 * 128;
  static constexpr int kNumMaps = 5;  // q, k, k_rope, v, o
  // + 1024: the dynamic shared-memory base is re-aligned to the 1024-byte swizzle atom.
  static constexpr int kSmemBytes = kOffMaps + kNumMaps * 128 + 1024;
  // Device scratch: two work counters (next item, blocks done), then per block its tensor maps,
  // the two item hand-over slots (scheduler -> producer -> consumers) and, e4m3, per V stage the
  // keys of its fill that belong to the sequence (producer -> transposing warps; -1: no more
  // fills). In device memory rather than shared for racecheck's sake (work_handover_sm90.cuh).
  static constexpr size_t kScratchFixed = 128;
  static constexpr size_t kSlotBytes = 64;
  static constexpr size_t kVValidBytes = kFp8 ? 64 : 0;  // 64: the next block's tensor maps stay 64-byte aligned
  static constexpr size_t kScratchPerBlock = kNumMaps * 128 + 2 * kSlotBytes + kVValidBytes;
  // Split key ranges (plan/kv_split.h): per split (q tile, head) slot, per consumer warpgroup an
  // arrival counter and a published flag (128 bytes for all), then per warpgroup the partial state
  // of the half that arrived first, in fragment order: 16 float4 of unnormalized O per thread
  // ([n][thread]), then (m0, m1, l0, l1) per thread. The half that arrives second keeps its own
  // state in registers (split_epilogue), so one part per warpgroup suffices.
  static constexpr size_t kSplitPartBytes = (DVO / 8) * 128 * 16 + 128 * 16;
  static constexpr size_t kSplitSlotBytes = 128 + 2 * kSplitPartBytes;
  static_assert(DQK % 64 == 0 && DVO == 128, "the sm90 kernel covers Dqk in {128, 192}, Dvo = 128");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory budget");
  static_assert(kOffFlags + kFlagBytes <= kOffMaps, "flags before the tensor maps");
  static_assert(kScratchFixed % 64 == 0 && kScratchPerBlock % 64 == 0, "every block's tensor maps 64-byte aligned");
  static_assert(kInBytes == 2 || (kInBytes == 1 && BN == 128), "e4m3: the V transpose covers 128-key tiles");
};

// Barrier slots inside the barrier area.
enum : int { kBarQFull0 = 0, kBarQEmpty0 = 1, kBarKFull = 2, kBarKEmpty = 4, kBarVFull = 6, kBarVEmpty = 8,
              kBarQFull1 = 10, kBarQEmpty1 = 11, kBarVCleared = 12,
              // e4m3 only: V transposed for P V (transposing warps -> consumers, and back).
              kBarVtFull = 14, kBarVtEmpty = 16 };
// The mbarriers of consumer warpgroup `cw`'s half of Q.
__device__ __forceinline__ int q_full_bar(int cw) { return cw == 0 ? kBarQFull0 : kBarQFull1; }
__device__ __forceinline__ int q_empty_bar(int cw) { return cw == 0 ? kBarQEmpty0 : kBarQEmpty1; }

struct Sm90Params {
  CUtensorMap tm_q;   // [q_rows, H, Dqk]
  CUtensorMap tm_k;   // [kv_rows, Hkv, Dqk - k_rope_dim]
  CUtensorMap tm_kr;  // [kv_rows, Hkv, k_rope_dim] or rank 2 [kv_rows, k_rope_dim]; = tm_k without a rope part
  CUtensorMap tm_v;   // [kv_rows, Hkv, Dvo]
  CUtensorMap tm_o;   // [q_rows, H, Dvo], boxes of 64 rows (TMA-store epilogue); = tm_q unless o_tma
  PrefillArgs args;
  int kr_rank;        // 3 or 2 (one rope row shared by every kv head)
  int o_tma;          // 1: the epilogue stages O in shared memory and stores it with TMA
  // 1 (an eager launch): the maps above, encoded for this launch from the tensors' rows, are used
  // as they are. 0 (a launch being captured into a CUDA graph): each block first rewrites its
  // copies' row extents to the plan's totals in the device schedule, so a replay after
  // re-planning reads and writes the new plan's rows (producer_sm90.cuh).
  int maps_final;
};

// One work item as the producer hands it to the consumers (through the device scratch). The
// first three 16-byte words travel for every kernel; the fourth only for e4m3 (descales).
struct alignas(16) ItemPlan {
  WorkItem it;
  int rows;      // valid q rows of the tile
  int n_begin;   // first kv row walked (a multiple of BN)
  int n_tiles;   // kv tiles walked; 0 when no row of the tile sees a key
  int valid;     // 0: no more work for this block
  int chunk;     // -1: the tile's whole kv range; 0 / 1: a half of a split tile (plan/kv_split.h)
  int slot;      // chunk >= 0: the partial-result slot its two halves share
  // e4m3: the item's descale factors (PrefillArgs), q_descale * k_descale and v_descale of its
  // (sequence, kv head); 1 when absent.
  float qk_descale;
  float v_descale;
  int pad[2];
};
static_assert(sizeof(ItemPlan) == 64, "four 16-byte words");
// 16-byte words of an ItemPlan a hand-over copies: the descales only for e4m3.
template <typename Shape>
constexpr int item_words() { return Shape::kFp8 ? 4 : 3; }

// Named barriers (id 0 is __syncthreads). Work items travel scheduler warp -> producer warp ->
// each consumer warpgroup through one slot per hop, each hop a full/empty pair; the two consumer
// warpgroups have a pair each, so neither waits for the other to take its next item. An id
// marked "+ warpgroup" is consumer warpgroup 0's; warpgroup 1's is the next one.
enum : int {
  kBarVClear = 1,                         // consumer warpgroup 0's 128 threads, clearing V rows
  kBarConsFull0 = 2,                      // + warpgroup: producer warp (32) -> consumer warpgroup (128)
  kBarSchedFull = 4, kBarSchedEmpty = 5,  // scheduler warp (32) <-> producer warp (32)
  kBarConsEmpty0 = 6,                     // + warpgroup: consumer warpgroup (128) -> producer warp (32)
  kBarSplit0 = 8,                         // + warpgroup: its 128 threads around a split arrival
  // 10: free
  kBarOWritten0 = 11,                     // + warpgroup: its O rows are (or its region is free) in shared memory
};
constexpr int kConsHopWg = 32 + 128;  // the producer warp and one consumer warpgroup
constexpr int kSchedHop = 64;

// Consumer warpgroup `cw`'s own copy (id ID + cw) of a "+ warpgroup" barrier above, of THREADS
// threads. The id must be an immediate, hence the branch on the (warp-uniform) warpgroup.
template <int ID, int THREADS>
__device__ __forceinline__ void warpgroup_bar_sync(int cw) {
  if (cw == 0) named_barrier_sync<ID, THREADS>();
  else named_barrier_sync<ID + 1, THREADS>();
}
template <int ID, int THREADS>
__device__ __forceinline__ void warpgroup_bar_arrive(int cw) {
  if (cw == 0) named_barrier_arrive<ID, THREADS>();
  else named_barrier_arrive<ID + 1, THREADS>();
}

// This block's tensor maps in the device scratch (after the fixed counters), in this order; in a
// launch captured into a graph the producer warp rewrites their extents and publishes them there
// (producer_sm90.cuh). Eager launches use the kernel parameter's maps, in the same order.
enum : int { kMapQ = 0, kMapK = 1, kMapKRope = 2, kMapV = 3, kMapO = 4 };
template <typename Shape>
__device__ __forceinline__ CUtensorMap* block_tensor_maps(const PrefillArgs& a) {
  return reinterpret_cast<CUtensorMap*>(static_cast<unsigned char*>(a.scratch) + Shape::kScratchFixed +
                                        blockIdx.x * Shape::kScratchPerBlock);
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
