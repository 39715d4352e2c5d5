// MLAKIT_SM90_CROSS_ITEM: the consumer loop walks the kv tiles of all the block's items as one
// stream, so an item's first S = Q K^T and softmax run under the previous item's last P V, and
// the previous item's epilogue runs under the next S, instead of the tensor cores idling at every
// item boundary (measured ~2.4 us per item, ~22% of a 999-token sequence's items: docs/perf-notes.md).
//
// One iteration, with ct the kv tile whose P is ready and nt the tile after it (ct's item's next
// tile, or the first tile of the item after it):
//   issue S(nt)                                 [Q of nt's item; a new item waits for its Q]
//   ct first of its item ? epilogue of the finished item, O = 0 : O *= alpha(ct)
//   issue O += P(ct) V(ct)
//   wait S(nt); softmax(nt) (fresh row state when nt starts an item)
//   wait P V; ct last of its item ? its row state is kept for its epilogue (next iteration)
// Every wgmma group is issued and waited inside one iteration, as in the per-item loop.
#pragma once

#include "common/mask_rule.h"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/score_transform.cuh"
#include "cuda/common/tile_store.cuh"
#include "cuda/sm90/epilogue_sm90.cuh"
#include "cuda/sm90/kernel_layout_sm90.cuh"
#include "cuda/sm90/mainloop_sm90.cuh"
#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/work_handover_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

// Rows that see no key: out = 0, lse = -inf (as the online softmax's empty state gives).
template <int DVO, typename T>
__device__ __forceinline__ void store_zero_rows(T* out_tile, int64_t o_stride, float* lse_tile, int64_t lse_stride,
                                                int warp_row0, int valid_rows, int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp_row0 + (lane >> 2) + r * 8;
    if (row >= valid_rows) continue;
    T* dst = out_tile + static_cast<int64_t>(row) * o_stride + (lane & 3) * 2;
#pragma unroll
    for (int n = 0; n < DVO / 8; ++n) *reinterpret_cast<uint32_t*>(dst + n * 8) = 0u;
    if (lse_tile != nullptr && (lane & 3) == 0) lse_tile[static_cast<int64_t>(row) * lse_stride] = -INFINITY;
  }
}

template <typename T, typename Shape>
__device__ __forceinline__ void consumer_xitem(const Sm90Params& p, uint32_t sbase, unsigned char* smem,
                                               const plan::ScheduleHeader& hdr, int cw) {
  static_assert(MLAKIT_SM90_K_AHEAD && MLAKIT_SM90_RESCALE_EARLY && !MLAKIT_SM90_PINGPONG &&
                    !MLAKIT_SM90_SOFTMAX_AFTER_PV && !MLAKIT_SM90_Q_PER_BOX && !MLAKIT_SM90_EXP_Q_ONCE &&
                    !MLAKIT_SM90_EXP_NO_STORE,
                "the cross-item consumer implements the default pipeline order only");
  constexpr int BN = Shape::BN, DVO = Shape::DVO;
  const PrefillArgs& a = p.args;
  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const ScoreTransform tf = ScoreTransform::from(hdr);
  auto bar = [&](int i) { return sbase + Shape::kOffBars + 8 * i; };
  const uint32_t q_rows_base = sbase + Shape::kOffQ + cw * 64 * 128;
  const int warp_row0 = cw * 64 + warp * 16;
  const ItemPlan* slot = item_slot<Shape>(a, 1);
  T* o_all = static_cast<T*>(a.out);
  const bool o_tma = p.o_tma != 0;

  auto next_item = [&] {
    named_barrier_sync<kBarConsFull, kConsHop>();
    const ItemPlan ip = load_item(slot);
    named_barrier_arrive<kBarConsEmpty, kConsHop>();
    return ip;
  };
  auto out_tile_of = [&](const ItemPlan& ip) {
    return o_all + static_cast<int64_t>(ip.it.q_begin + ip.it.row0) * a.o_stride_tok +
           static_cast<int64_t>(ip.it.head) * a.o_stride_head;
  };
  auto lse_tile_of = [&](const ItemPlan& ip) -> float* {
    return a.lse == nullptr ? nullptr
                            : a.lse + static_cast<int64_t>(ip.it.q_begin + ip.it.row0) * a.lse_stride_tok +
                                  static_cast<int64_t>(ip.it.head) * a.lse_stride_head;
  };
  // The next item with keys; items whose rows see none store their zeros right here.
  auto take = [&] {
    ItemPlan ip = next_item();
    while (ip.valid && ip.n_tiles == 0) {
      store_zero_rows<DVO>(out_tile_of(ip), a.o_stride_tok, lse_tile_of(ip), a.lse_stride_tok, warp_row0, ip.rows,
                           lane);
      ip = next_item();
    }
    return ip;
  };
  named_barrier_arrive<kBarConsEmpty, kConsHop>();  // the producer's first slot is free
#if MLAKIT_SM90_EXP_PARAM_MAPS
  const CUtensorMap* tm_o = &p.tm_o;
#else
  const CUtensorMap* tm_o = block_tensor_maps<Shape>(a) + kMapO;
  if (tid == 0 && o_tma) tensormap_acquire(tm_o);
#endif
  int owed_stage = -1;  // thread 0: the V stage whose "empty" arrival waits for a TMA store's reads
  auto pay_v = [&] {
    if (owed_stage >= 0) {
      tma_store_wait_read();
      mbar_arrive(bar(kBarVEmpty + owed_stage));
      owed_stage = -1;
    }
  };

  float o[DVO / 8][4];
#pragma unroll
  for (int n = 0; n < DVO / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;  // rescaled before any P V
  float s[BN / 8][4];
  uint32_t pf[BN / 16][4];
  float alpha[2];
  float(&s_flat)[64] = reinterpret_cast<float(&)[64]>(s);
  float(&o_flat)[64] = reinterpret_cast<float(&)[64]>(o);
  uint32_t(&pf_flat)[BN / 4] = reinterpret_cast<uint32_t(&)[BN / 4]>(pf);

  // The epilogue of a finished item whose O is in `o`; last_stage: the V stage of its last P V.
  auto epilogue = [&](const ItemPlan& ip, const float (&m)[2], const float (&l)[2], uint32_t last_stage) {
    T* out_tile = out_tile_of(ip);
    float* lse_tile = lse_tile_of(ip);
    if (ip.chunk >= 0) {
      split_epilogue<Shape>(o, m, l, ip, a, smem, cw, tid, out_tile, lse_tile, a.o_stride_tok, a.lse_stride_tok,
                            warp_row0, lane);
    } else if (o_tma) {
      if (tid == 0) pay_v();                  // one owed stage at a time
      named_barrier_sync<kBarOStage, 256>();  // both warpgroups' P V reads of the stage are done
      if (ip.rows >= (cw + 1) * 64) {
        stage_and_store_o<Shape, T>(o, l, sbase + Shape::kOffV + last_stage * Shape::kVBytes, tm_o, cw, warp, lane,
                                    tid, ip.it.head, ip.it.q_begin + ip.it.row0 + cw * 64);
        store_lse_rows(m, l, lse_tile, a.lse_stride_tok, warp_row0, ip.rows, lane);
        if (tid == 0) owed_stage = static_cast<int>(last_stage);
      } else {  // the sequence ends inside these rows: a box would write the next sequence's
        store_rows<DVO>(o, m, l, out_tile, a.o_stride_tok, lse_tile, a.lse_stride_tok, warp_row0, ip.rows, lane);
        if (tid == 0) mbar_arrive(bar(kBarVEmpty + last_stage));
      }
    } else {
      store_rows<DVO>(o, m, l, out_tile, a.o_stride_tok, lse_tile, a.lse_stride_tok, warp_row0, ip.rows, lane);
    }
  };
  // The (masked) softmax of a tile of item `ip` starting at key n0.
  auto softmax_of = [&](RowSoftmax<BN / 8>& sm, const ItemPlan& ip, int n0) {
    const rule::MaskRule<int> mr{ip.it.lq, ip.it.lk, hdr.causal != 0, hdr.window_left};
    const int row_in_seq[2] = {ip.it.row0 + warp_row0 + lane / 4, ip.it.row0 + warp_row0 + lane / 4 + 8};
    softmax_step<BN>(sm, s, alpha, tf, mr, row_in_seq, n0, mr.all_visible(ip.it.row0 + cw * 64, 64, n0, BN), lane);
  };

  uint32_t q_iter = 0;
  uint32_t kv = 0;  // stream index of ct (its K and V are in stage kv & 1, phase (kv >> 1) & 1)
  ItemPlan ct_item = take();
  if (ct_item.valid) {
    RowSoftmax<BN / 8> sm;  // the row state of the newest tile's item
    // An item whose O waits in `o` for its epilogue: what the epilogue needs of it (registers are
    // tight here: S, P and O are all live under the next S).
    bool pend = false;
    int pend_head = 0, pend_row = 0, pend_rows = 0, pend_chunk = -1, pend_slot = -1;
    float pend_m[2] = {0.f, 0.f}, pend_l[2] = {0.f, 0.f};
    uint32_t pend_stage = 0;
    auto pend_epilogue = [&] {
      ItemPlan ip{};
      ip.it.head = pend_head;
      ip.it.q_begin = pend_row;  // row0 = 0: q_begin + row0 is the tile's first row
      ip.rows = pend_rows;
      ip.chunk = pend_chunk;
      ip.slot = pend_slot;
      epilogue(ip, pend_m, pend_l, pend_stage);
    };
    ItemPlan upcoming{};  // the item after the one of the newest tile (fetched once that tile is its last)
    int t = 0;            // ct's index inside its item
    int n0 = ct_item.n_begin;

    // Prologue: S and softmax of the first item's first tile.
    mbar_wait(bar(kBarQFull), q_iter & 1);
    ++q_iter;
    mbar_wait(bar(kBarKFull + 0), 0);
    wgmma_fence();
    issue_qk<T, Shape>(s_flat, q_rows_base, sbase + Shape::kOffK);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s_flat);
    if (lane == 0) {
      mbar_arrive(bar(kBarKEmpty + 0));
      if (ct_item.n_tiles == 1) mbar_arrive(bar(kBarQEmpty));
    }
    sm.init();
    softmax_of(sm, ct_item, n0);
    pack_p<T, BN>(pf, s);
    if (ct_item.n_tiles == 1) upcoming = take();

    while (true) {
      const bool same = t + 1 < ct_item.n_tiles;  // nt is ct's item's next tile
      if (!same && !upcoming.valid) break;
      const int nt_n0 = same ? n0 + BN : upcoming.n_begin;
      const int nt_t = same ? t + 1 : 0;
      const bool nt_last = nt_t + 1 == (same ? ct_item.n_tiles : upcoming.n_tiles);
      const uint32_t ct_stage = kv & 1, ct_phase = (kv >> 1) & 1;
      const uint32_t nt_stage = (kv + 1) & 1, nt_phase = ((kv + 1) >> 1) & 1;

      // S(nt) = Q K(nt)^T; a new item's Q was loaded once the previous item's last S was done.
      if (!same) {
        mbar_wait(bar(kBarQFull), q_iter & 1);
        ++q_iter;
      }
#if MLAKIT_SM90_XITEM_EPI_UNDER_S
      mbar_wait(bar(kBarKFull + nt_stage), nt_phase);
      wgmma_fence();
      issue_qk<T, Shape>(s_flat, q_rows_base, sbase + Shape::kOffK + nt_stage * Shape::kKBytes);
      wgmma_commit();
      // O while S runs: the finished item's epilogue before ct's item starts accumulating, or the
      // rescale by ct's softmax factor.
      if (t == 0 && pend) {
        pend_epilogue();
        pend = false;
      }
      rescale_rows(o, alpha);  // an item's first P V ignores O
#else
      // The finished item's epilogue first (S, P and O all live across it spilled), then S(nt);
      // the rescale by ct's softmax factor runs under S.
      if (t == 0 && pend) {
        if (tid == 0) pay_v();
        pend_epilogue();
        pend = false;
      }
      mbar_wait(bar(kBarKFull + nt_stage), nt_phase);
      wgmma_fence();
      issue_qk<T, Shape>(s_flat, q_rows_base, sbase + Shape::kOffK + nt_stage * Shape::kKBytes);
      wgmma_commit();
      // Unconditional (a branch here makes ptxas spill O): an item's first P V ignores O.
      rescale_rows(o, alpha);
#endif
      mbar_wait(bar(kBarVFull + ct_stage), ct_phase);
      const bool ct_last = !same;
      if (ct_last) clear_v_rows_past<Shape>(smem, ct_stage, ct_item.it.lk - n0);
      wgmma_fence();  // O was just written by ordinary instructions
      issue_pv<T, Shape>(o_flat, pf, sbase + Shape::kOffV + ct_stage * Shape::kVBytes, t != 0);
      wgmma_commit();
      // ct's item is done with: nt's item becomes the current one.
      if (!same) {
        pend = true;
        pend_head = ct_item.it.head;
        pend_row = ct_item.it.q_begin + ct_item.it.row0;
        pend_rows = ct_item.rows;
        pend_chunk = ct_item.chunk;
        pend_slot = ct_item.slot;
        pend_stage = ct_stage;
        ct_item = upcoming;
      }
      wgmma_wait<1>();
      fence_regs(s_flat);
      if (lane == 0) {
        mbar_arrive(bar(kBarKEmpty + nt_stage));
        if (nt_last) mbar_arrive(bar(kBarQEmpty));
      }
      if (!same) {  // ct's item has all its keys: keep its row state for the epilogue
        pend_m[0] = sm.m[0];
        pend_m[1] = sm.m[1];
        sm.finish(pend_l);
        sm.init();
      }
      softmax_of(sm, ct_item, nt_n0);
      // The stage a TMA store of this iteration's epilogue read: its "empty" arrival first (the
      // producer may need that stage before it can hand over the next item).
      if (tid == 0) pay_v();
      // nt is its item's last tile: the item after it is needed next iteration; the slot's L2
      // round trip overlaps the rest of the P V.
      if (nt_last) upcoming = take();
      wgmma_wait<0>();
      fence_regs(o_flat);
      fence_regs(pf_flat);  // P was read asynchronously until here: keep it live
      // With the TMA-store epilogue, warp 0's arrival for an item's last stage waits for the stores.
      if (lane == 0 && !(ct_last && o_tma && pend_chunk < 0 && warp == 0)) {
        mbar_arrive(bar(kBarVEmpty + ct_stage));
      }
      pack_p<T, BN>(pf, s);
      t = nt_t;
      n0 = nt_n0;
      ++kv;
    }

    // The stream's last tile: its P V, then the last two epilogues.
    const uint32_t ct_stage = kv & 1, ct_phase = (kv >> 1) & 1;
    if (t == 0 && pend) {
      if (tid == 0) pay_v();
      pend_epilogue();
      pend = false;
    }
    rescale_rows(o, alpha);
    mbar_wait(bar(kBarVFull + ct_stage), ct_phase);
    clear_v_rows_past<Shape>(smem, ct_stage, ct_item.it.lk - n0);
    wgmma_fence();
    issue_pv<T, Shape>(o_flat, pf, sbase + Shape::kOffV + ct_stage * Shape::kVBytes, t != 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o_flat);
    fence_regs(pf_flat);
    if (lane == 0 && !(o_tma && ct_item.chunk < 0 && warp == 0)) mbar_arrive(bar(kBarVEmpty + ct_stage));
    float l_total[2];
    sm.finish(l_total);
    epilogue(ct_item, sm.m, l_total, ct_stage);
  }
  if (tid == 0) {
    pay_v();
    tma_store_wait_all();  // the output is written before the block exits
  }
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
