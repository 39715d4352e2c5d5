// The Hopper (sm_90a) ragged prefill kernel: warp-specialized, TMA + wgmma, persistent.
//
// A block of three warpgroups owns one 128-row q tile of one (sequence, q head) at a time:
//   - warpgroup 0 gives its registers away (setmaxnreg) and runs two warps:
//     the scheduler warp takes work items dynamically (an atomic counter in the device scratch,
//     reset by the last block out), claiming the next one once the producer has issued the
//     current one's last K load, so the plan's longest-first order holds across blocks;
//     the producer warp issues the TMA loads: each consumer warpgroup's half of Q once per item,
//     then K one tile ahead of V into a
//     two-stage shared-memory ring, each load completing on an mbarrier; "empty" mbarriers tell
//     it when a stage may be refilled.
//   - warpgroups 1 and 2 (the consumers, 232 registers each): 64 query rows each. Per kv tile:
//     S = Q K^T with wgmma (both operands in shared memory, 12 k-steps of 16 for Dqk = 192), the
//     online softmax in registers, then O += P V with P as the register A operand and V read
//     MN-major straight from its token-major layout (no transpose copy, V never padded).
//     The next tile's S = Q K^T is issued before this tile's P V, O is rescaled while S runs, and
//     the softmax runs while P V is in flight (FlashAttention-3's intra-warpgroup overlap).
// Items travel scheduler -> producer -> consumers through per-block slots in the device scratch
// handed over with named barriers, one pair per consumer warpgroup. The two consumer warpgroups
// never wait for each other: each has its own half of Q, stages its output in its own
// shared-memory region and stores it with TMA; the V rows past a sequence are cleared by the
// first, which signals the second through an mbarrier. Only the K/V ring couples them. The plan orders items so that those in flight together are q tiles of the same
// (sequence, head) and share its K/V in L2 (plan::ScheduleKind::kSequenceRuns).
// Nothing is padded: a kv tile that runs past the sequence is masked (scores -> -inf), and the V
// rows past the sequence are zeroed in shared memory so 0 * (whatever is there) cannot make NaN.
// FP8 (e4m3 inputs, Sm90Elems::kFp8): the same kernel with k = 32 wgmmas on K-major operands: V is
// transposed in shared memory by warps 2 and 3 of warpgroup 0 (vtranspose_sm90.cuh), which also
// zero its keys past the sequence, P is rounded to e4m3 (scaled by 2^8) in the operand layout that
// transpose matches, the descale factors fold into the softmax scale (q, k) and the output (v).
// Extents: an eager launch's tensor maps hold the tensors' rows (>= the plan's totals; rows past
// a sequence are masked or zeroed as above, whichever sequence or buffer they belong to). A
// launch captured into a CUDA graph has each block rewrite the outermost extent of its copies of
// the maps to the plan's totals (read from the device schedule), so a graph replayed after
// re-planning reads and writes the new plan's rows.
//
// The pieces: kernel_options_sm90.cuh (tuning constants), kernel_layout_sm90.cuh (shape, barriers,
// parameters), work_handover_sm90.cuh (scheduler warp), producer_sm90.cuh (tensor maps, loads),
// mainloop_sm90.cuh (wgmma issue, softmax step), vtranspose_sm90.cuh (e4m3 V), epilogue_sm90.cuh;
// this file holds the consumer loop and the kernel that assigns the roles.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "contract/mask_rule.h"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/score_transform.cuh"
#include "cuda/common/tile_store.cuh"
#include "cuda/sm90/epilogue_sm90.cuh"
#include "cuda/sm90/kernel_layout_sm90.cuh"
#include "cuda/sm90/mainloop_sm90.cuh"
#include "cuda/sm90/producer_sm90.cuh"
#include "cuda/sm90/trace_sm90.cuh"
#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/vtranspose_sm90.cuh"
#include "cuda/sm90/work_handover_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

// Warpgroups 1 and 2: 64 query rows each of the item the producer hands over.
template <typename E, typename Shape>
__device__ __forceinline__ void consumer(const Sm90Params& p, uint32_t sbase, unsigned char* smem,
                                         const plan::ScheduleHeader& hdr, int cw) {
  using TOut = typename E::TOut;
  constexpr int BN = Shape::BN, DVO = Shape::DVO;
  // P V reads V as loaded (16-bit) or transposed (e4m3), each stage with its own full / empty pair.
  constexpr int kBarPvFull = E::kFp8 ? kBarVtFull : kBarVFull;
  constexpr int kBarPvEmpty = E::kFp8 ? kBarVtEmpty : kBarVEmpty;
  const PrefillArgs& a = p.args;
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const ScoreTransform tf = ScoreTransform::from(hdr);
  auto bar = [&](int i) { return sbase + Shape::kOffBars + 8 * i; };
  const QDescs<Shape> q_descs =
      make_q_descs<E, Shape>(sbase + Shape::kOffQ + cw * Shape::kWgRows * Shape::kRowBytes);  // this warpgroup's rows
  const int warp_row0 = cw * Shape::kWgRows + warp * 16;                          // inside the tile
  const ItemPlan* slot = item_slot<Shape>(a, 1);

  // Takes the next item from the producer, through this warpgroup's own pair of named barriers
  // (the two warpgroups never meet at an item's end). Called for item i + 1 once item i's last
  // P V is issued (or before its epilogue, when it has no kv tile), so the wait overlaps that work.
  auto next_item = [&] {
    warpgroup_bar_sync<kBarConsFull0, kConsHopWg>(cw);
    const ItemPlan ip = load_item<item_words<Shape>()>(slot);
    warpgroup_bar_arrive<kBarConsEmpty0, kConsHopWg>(cw);
    return ip;
  };
  warpgroup_bar_arrive<kBarConsEmpty0, kConsHopWg>(cw);  // the producer's first slot is free
  // This warpgroup's half of Q, and the phases of the stages' V-cleared barriers.
  const int q_full = q_full_bar(cw);
  const int q_empty = q_empty_bar(cw);
  uint32_t cleared_phases = 0;  // bit s: parity of stage s's next V-cleared phase
  TOut* o_all = static_cast<TOut*>(a.out);
  uint32_t q_iter = 0, kv_iter = 0;
  const bool o_tma = p.o_tma != 0;  // the TMA-store epilogue (else stores from registers)
  ItemPlan upcoming = next_item();
  // The producer warp published this block's copy of the output map before it handed over the
  // first item (with the plan's extents in a captured launch, as encoded in an eager one).
  const CUtensorMap* tm_o = block_tensor_maps<Shape>(a) + kMapO;
  if (tid == 0 && o_tma) tensormap_acquire(tm_o);
#if MLAKIT_SM90_TRACE
  int trace_k = 0;  // this thread's item count (every consumer thread; the tracer's record index)
  TraceRec trace_rec{};
  const bool tracer = cw == 0 && tid == 0;
#endif
  while (upcoming.valid) {
    const ItemPlan ip = upcoming;
    const WorkItem& it = ip.it;
#if MLAKIT_SM90_TRACE
    if (tracer) {
      trace_rec = TraceRec{};
      trace_rec.t_begin = global_timer_ns();
      trace_rec.n_tiles = ip.n_tiles;
      trace_rec.head = it.head;
      trace_rec.row0 = it.row0;
      trace_rec.q_begin = it.q_begin;
    }
    const uint32_t trace_slot = trace_tile_slot(trace_k, cw);
#endif
    const rule::MaskRule<int> mr{it.lq, it.lk, hdr.causal != 0, hdr.window_left};
    // The key tiles this warpgroup's 64 rows see whole (no per-element mask): one range an item,
    // two compares a tile.
    const rule::KvRange<int> full_tiles = mr.full_tile_starts(it.row0 + cw * 64, 64, BN);
    auto tile_full = [&](int n) { return full_tiles.lo <= n && n < full_tiles.hi; };
    const int row_in_seq[2] = {it.row0 + warp_row0 + lane / 4, it.row0 + warp_row0 + lane / 4 + 8};
    // e4m3: q_descale * k_descale scales every score of the item (sm_scale's and the soft cap's
    // exponent alike).
    ScoreTransform tf_item = tf;
    if constexpr (E::kFp8) {
      tf_item.scale_log2 *= ip.qk_descale;
      tf_item.cap_exp_scale *= ip.qk_descale;
    }

    float o[DVO / 8][4];
#pragma unroll
    for (int n = 0; n < DVO / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    RowSoftmax<BN / 8, E::kPLog2Offset, E::kSoftmaxSlack> sm;
    // With slack (16-bit inputs) most tiles leave every factor at 1 and a warp skips the rescale;
    // e4m3 (no slack) rescales every tile, as a vote would rarely save it.
    auto rescale_o = [](float (&acc)[DVO / 8][4], const float (&f)[2]) {
      if constexpr (E::kSoftmaxSlack > 0) {
        rescale_rows_if_needed(acc, f);
      } else {
        rescale_rows(acc, f);
      }
    };
    sm.init();

    bool fetched = false;  // `upcoming` already holds the next item
    if (ip.n_tiles > 0) {
      float s[BN / 8][4];
      uint32_t pf[Shape::kPvSteps][4];
      float alpha[2];
      float(&s_flat)[64] = reinterpret_cast<float(&)[64]>(s);
      float(&o_flat)[64] = reinterpret_cast<float(&)[64]>(o);
      uint32_t(&pf_flat)[Shape::kPvSteps * 4] = reinterpret_cast<uint32_t(&)[Shape::kPvSteps * 4]>(pf);

      const uint32_t q_parity = q_iter & 1;
      mbar_wait(bar(q_full), q_parity);
      // Only the block's first item is dephased; after it the warpgroups stay apart by themselves
      // (they have no meeting point at an item's end).
      const bool dephase = kDephaseNs > 0 && cw == 1 && q_iter == 0;
      ++q_iter;

      // kv tile 0: S, softmax, P.
      uint32_t stage = kv_iter & 1, parity = (kv_iter >> 1) & 1;
      mbar_wait(bar(kBarKFull + stage), parity);
      // The second warpgroup issues its first S a little later, so the two S products run one
      // after the other and the first warpgroup's softmax overlaps the second's S (issued together
      // they interleave and both softmaxes start late). Timing only: no result depends on it.
      if (dephase) __nanosleep(kDephaseNs);
#if MLAKIT_SM90_TRACE
      if (tracer) trace_rec.t_qk = global_timer_ns();
      if (tid == 0) trace_tile_stamp(trace_slot, 0, kTileIssue);
#endif
      wgmma_fence();
      issue_qk<E, Shape>(s_flat, q_descs, sbase + Shape::kOffK + stage * Shape::kKBytes);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(s_flat);
#if MLAKIT_SM90_TRACE
      if (tracer) trace_rec.t_s0 = global_timer_ns();
      if (tid == 0) trace_tile_stamp(trace_slot, 0, kTileSDone);
#endif
      if (lane == 0) {
        mbar_arrive(bar(kBarKEmpty + stage));
        if (ip.n_tiles == 1) mbar_arrive(bar(q_empty));
      }
      int n0 = ip.n_begin;
      softmax_step<BN>(sm, s, alpha, tf_item, mr, row_in_seq, n0, tile_full(n0), lane);
#if MLAKIT_SM90_TRACE
      if (tid == 0) trace_tile_stamp(trace_slot, 0, kTileSmDone);
#endif
      pack_p<E, BN>(pf, s);
#if MLAKIT_SM90_TRACE
      if (tid == 0) trace_tile_stamp(trace_slot, 0, kTilePReady);
#endif

      // The tail of kv tile t (its S issued; prev_stage / prev_parity: tile t-1's V stage):
      // O += P_{t-1} V_{t-1}, S_t's softmax while that P V runs, then P_t.
      auto pv_then_softmax = [&](uint32_t prev_stage, uint32_t prev_parity, int t) {
        mbar_wait(bar(kBarPvFull + prev_stage), prev_parity);  // V_{t-1} is loaded after K_t
        wgmma_fence();  // O was just written by ordinary instructions
        issue_pv<E, Shape>(o_flat, pf, sbase, prev_stage);
        wgmma_commit();
        wgmma_wait<1>();  // S_t
        fence_regs(s_flat);
#if MLAKIT_SM90_TRACE
        if (tid == 0) trace_tile_stamp(trace_slot, t, kTileSDone);
#endif
        if (lane == 0) {
          mbar_arrive(bar(kBarKEmpty + stage));
          if (t == ip.n_tiles - 1) mbar_arrive(bar(q_empty));
        }
        softmax_step<BN>(sm, s, alpha, tf_item, mr, row_in_seq, n0, tile_full(n0), lane);
#if MLAKIT_SM90_TRACE
        if (tid == 0) trace_tile_stamp(trace_slot, t, kTileSmDone);
#endif
        wgmma_wait<0>();
        fence_regs(o_flat);
        fence_regs(pf_flat);  // P was read asynchronously until here: keep it live
        if (lane == 0) mbar_arrive(bar(kBarPvEmpty + prev_stage));
        pack_p<E, BN>(pf, s);
#if MLAKIT_SM90_TRACE
        if (tid == 0) trace_tile_stamp(trace_slot, t, kTilePReady);
#endif
      };
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
#if MLAKIT_SM90_TRACE
        if (tid == 0) trace_tile_stamp(trace_slot, t, kTileIssue);
#endif
        wgmma_fence();
        issue_qk<E, Shape>(s_flat, q_descs, sbase + Shape::kOffK + stage * Shape::kKBytes);
        wgmma_commit();
        rescale_o(o, alpha);
        pv_then_softmax(prev_stage, prev_parity, t);
      }

      // The last tile's P V. V rows past the sequence end hold whatever follows it (or TMA's
      // zeros): P is 0 there, but 0 * inf would be NaN, so zero them first (warpgroup 0 clears
      // them and signals warpgroup 1 through the stage's V-cleared mbarrier; e4m3 V was cleared
      // by its transpose).
      mbar_wait(bar(kBarPvFull + stage), parity);
#if MLAKIT_SM90_TRACE
      if (tracer) trace_rec.t_vlast = global_timer_ns();
#endif
      if constexpr (!E::kFp8) {
        if (it.lk - n0 < BN) {
          clear_v_rows_past<Shape>(smem, stage, it.lk - n0, cw, tid, bar(kBarVCleared + stage),
                                   (cleared_phases >> stage) & 1);
          cleared_phases ^= 1u << stage;
        }
      }
      rescale_o(o, alpha);
      wgmma_fence();
      issue_pv<E, Shape>(o_flat, pf, sbase, stage);
      wgmma_commit();
      // The next item, with the last P V in flight: the producer hands it over once the scheduler
      // has claimed it (after this item's last K load was issued), so the wait for it and the slot's
      // L2 round trip run under the P V. Taken before the P V's issue, they delayed it by 0.3-0.6 us
      // per item (block timelines: bench/diagnostics/sm90_trace.py).
      upcoming = next_item();
      fetched = true;
#if MLAKIT_SM90_TRACE
      if (tracer) trace_rec.t_next = global_timer_ns();
#endif
      wgmma_wait<0>();
      fence_regs(o_flat);
      fence_regs(pf_flat);
#if MLAKIT_SM90_TRACE
      if (tracer) trace_rec.t_pv = global_timer_ns();
#endif
      if (lane == 0) mbar_arrive(bar(kBarPvEmpty + stage));
      ++kv_iter;
    }

    if (!fetched) upcoming = next_item();
    // Epilogue (also for tiles whose rows see no key: out = 0, lse = -inf).
    float l_total[2];
    sm.finish(l_total);
    // e4m3: v_descale scales the output (O / l is linear in V); the row max the LSE is built from
    // loses P's 2^kPLog2Offset, which the row sum carries.
    float m_out[2] = {sm.m[0], sm.m[1]};
    if constexpr (E::kFp8) {
      const float vd[2] = {ip.v_descale, ip.v_descale};
      rescale_rows(o, vd);
      m_out[0] -= static_cast<float>(E::kPLog2Offset);
      m_out[1] -= static_cast<float>(E::kPLog2Offset);
    }
    TOut* out_tile = o_all + static_cast<int64_t>(it.q_begin + it.row0) * a.o_stride_tok +
                     static_cast<int64_t>(it.head) * a.o_stride_head;
    float* lse_tile = a.lse == nullptr ? nullptr
                                       : a.lse + static_cast<int64_t>(it.q_begin + it.row0) * a.lse_stride_tok +
                                             static_cast<int64_t>(it.head) * a.lse_stride_head;
    if (ip.chunk >= 0) {
      split_epilogue<Shape>(o, m_out, l_total, ip, a, smem, cw, tid, out_tile, lse_tile, a.o_stride_tok,
                            a.lse_stride_tok, warp_row0, lane);
    } else if (o_tma && ip.n_tiles > 0) {
      // Through this warpgroup's own staging region, so neither warpgroup waits for the other.
      if (ip.rows >= (cw + 1) * Shape::kWgRows) {
        stage_and_store_o<Shape, TOut>(o, l_total, sbase + Shape::kOffOStage + cw * Shape::kOStageBytes, tm_o, cw,
                                       warp, lane, tid, it.head, it.q_begin + it.row0 + cw * Shape::kWgRows);
        store_lse_rows(m_out, l_total, lse_tile, a.lse_stride_tok, warp_row0, ip.rows, lane);
      } else {  // the sequence ends inside these rows: a box would write the next sequence's
        store_rows<DVO>(o, m_out, l_total, out_tile, a.o_stride_tok, lse_tile, a.lse_stride_tok, warp_row0,
                        ip.rows, lane);
      }
    } else {
      store_rows<DVO>(o, m_out, l_total, out_tile, a.o_stride_tok, lse_tile, a.lse_stride_tok, warp_row0, ip.rows,
                      lane);
    }
#if MLAKIT_SM90_TRACE
    if (tracer) {
      trace_rec.t_end = global_timer_ns();
      if (blockIdx.x < kTraceBlocks && trace_k < kTracePerBlock)
        g_sm90_trace[blockIdx.x * kTracePerBlock + trace_k] = trace_rec;
    }
    ++trace_k;
#endif
  }
  if (tid == 0) tma_store_wait_all();  // the output is written before the block exits
#if MLAKIT_SM90_TRACE
  if (tracer && blockIdx.x < kTraceBlocks) {
    g_sm90_block_t[2 * blockIdx.x + 1] = global_timer_ns();
    g_sm90_trace_n[blockIdx.x] = trace_k;
  }
#endif
}

template <typename E, typename Shape>
__global__ void __launch_bounds__(Shape::kThreads, 1) prefill_sm90_kernel(const __grid_constant__ Sm90Params p) {
  extern __shared__ unsigned char smem_raw[];
  // 128-byte swizzle atoms are 1024 bytes and the swizzle follows address bits, so the tiles
  // start on a 1024-byte boundary.
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - raw);

  // PDL (docs/sm90-kernel.md): from here on every thread reads what the previous kernel may write (the
  // schedule, q/k/v) or writes what it may still read (scratch, out), so all wait for it first.
  pdl_wait();
  const ScheduleView sched = ScheduleView::from(p.args);
  const plan::ScheduleHeader hdr = *sched.header;
  // Broadcast from lane 0 so the compiler knows the warpgroup index is warp-uniform: the wgmma
  // descriptors derived from it then live in uniform registers (no R2UR per wgmma, no spills).
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);

#if MLAKIT_SM90_TRACE
  if (threadIdx.x == 128 && blockIdx.x < kTraceBlocks) g_sm90_block_t[2 * blockIdx.x] = global_timer_ns();
#endif
  if (threadIdx.x == 0) {
    // The plan must have been built for this kernel's tile, or rows would be skipped or repeated.
    if (hdr.block_m != Shape::BM || hdr.block_n != Shape::BN) __trap();
    const uint32_t bars = sbase + Shape::kOffBars;
    mbar_init(bars + 8 * kBarQFull0, 1);
    mbar_init(bars + 8 * kBarQFull1, 1);
    // Each half of Q is released by its own warpgroup's four warps.
    mbar_init(bars + 8 * kBarQEmpty0, Shape::kConsumerWarps / 2);
    mbar_init(bars + 8 * kBarQEmpty1, Shape::kConsumerWarps / 2);
    for (int s = 0; s < Shape::kStages; ++s) mbar_init(bars + 8 * (kBarVCleared + s), 1);
    for (int s = 0; s < Shape::kStages; ++s) {
      mbar_init(bars + 8 * (kBarKFull + s), 1);
      mbar_init(bars + 8 * (kBarKEmpty + s), Shape::kConsumerWarps);
      mbar_init(bars + 8 * (kBarVFull + s), 1);
      // e4m3: the raw V stage is released by the two transposing warps, the transposed one by
      // the consumers.
      mbar_init(bars + 8 * (kBarVEmpty + s), E::kFp8 ? 2 : Shape::kConsumerWarps);
      if constexpr (E::kFp8) {
        mbar_init(bars + 8 * (kBarVtFull + s), 2);
        mbar_init(bars + 8 * (kBarVtEmpty + s), Shape::kConsumerWarps);
      }
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
      producer_warp<Shape>(p, sbase, smem, gmaps, lane);
    } else if (warp == 1) {
      scheduler_warp<Shape>(p, sched, hdr, lane);
    } else if constexpr (E::kFp8) {
      transpose_v_warp<Shape>(sbase, v_valid_slots<Shape>(p.args), warp - 2, lane);
    }
  } else {
    setmaxnreg_inc<232>();
    consumer<E, Shape>(p, sbase, smem, hdr, wg - 1);
  }
}

// Host side (prefill_launch_sm90.cuh): builds the tensor maps and launches.
template <typename E, int DQK, int DVO>
void launch_prefill_sm90(const PrefillArgs& args, int grid_blocks, cudaStream_t stream);
template <typename E, int DQK, int DVO>
int blocks_per_sm_sm90();

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
