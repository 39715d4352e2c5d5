// The producer warp: the per-block tensor maps with the plan's extents, then the TMA loads of Q,
// K and V into their shared-memory rings.
#pragma once

#include "cuda/sm90/kernel_layout_sm90.cuh"
#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/work_handover_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

// Warp 0 of warpgroup 0, all lanes: the tensor maps the block's TMA loads use. Eager launches
// (maps_final): the kernel parameter's. Launches captured into a graph: per-block copies with the
// plan's extents (prefill_kernel_sm90.cuh, "Extents"), which lane 0 then acquires for its loads.
// Either way the output map's per-block copy is published for the epilogue's stores.
template <typename Shape>
__device__ __forceinline__ CUtensorMap* prepare_tensor_maps(const Sm90Params& p, uint32_t sbase, unsigned char* smem,
                                                            const plan::ScheduleHeader& hdr, int lane) {
  CUtensorMap* gmaps = block_tensor_maps<Shape>(p.args);
  const uint32_t smaps = sbase + Shape::kOffMaps;
  if (p.maps_final) {
    // An eager launch's maps are final: its loads use the parameter's (tm_q..tm_k_rope..tm_v are
    // consecutive, in kMap order) with no rewrite or acquire on the block's critical path. The
    // epilogue, whose code captured launches share, stores through this block's copy of the
    // output map: copied and published unchanged (the consumers acquire it, as always).
    if (lane < 8) {
      reinterpret_cast<uint4*>(smem + Shape::kOffMaps)[4 * 8 + lane] = reinterpret_cast<const uint4*>(&p.tm_o)[lane];
    }
    __syncwarp();
    tensormap_publish(&gmaps[kMapO], smaps + 4 * 128);
    return const_cast<CUtensorMap*>(&p.tm_q);
  }
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
    for (int m = kMapQ; m < kMapO; ++m) tensormap_acquire(&gmaps[m]);
  }
  return gmaps;
}

// Warp 0 of warpgroup 0 (lane 0 issues): TMA loads of each consumer warpgroup's half of Q once
// per item, then K one tile ahead of V (the consumers need K_{t+1} and V_t together), each into a
// two-stage ring guarded by mbarriers. Items go to each consumer warpgroup through its own pair of
// named barriers, and the scheduler is asked for the next item after the current one's last K
// load (the claim, its decode and the two slot round trips then run under the last ~1.5 tiles:
// +1.7-2.3% on the ragged batches against asking after the last V load; asking one or two K
// loads earlier measured level).
// e4m3: before each V fill's arrive, lane 0 writes how many of its keys belong to the sequence
// (the transposing warps zero the others: vtranspose_sm90.cuh), and once no item is left it ends
// the transposing warps with a fill of none (-1).
template <typename Shape>
__device__ __forceinline__ void producer_warp(const Sm90Params& p, uint32_t sbase, unsigned char* smem,
                                              const CUtensorMap* gmaps, int lane) {
  constexpr int BN = Shape::BN;
  const PrefillArgs& a = p.args;
  const int group = a.num_qo_heads / a.num_kv_heads;
  const int nope_cols = Shape::DQK - a.k_rope_dim;  // columns of K that come from `k`
  auto bar = [&](int i) { return sbase + Shape::kOffBars + 8 * i; };
  const ItemPlan* from_sched = item_slot<Shape>(a, 0);
  int* const v_valid = v_valid_slots<Shape>(a);  // e4m3 only
  ItemPlan* to_cons = item_slot<Shape>(a, 1);

  named_barrier_arrive<kBarSchedEmpty, kSchedHop>();  // the scheduler's first slot is free
  uint32_t q_iter = 0, kv_iter = 0;
  while (true) {
    named_barrier_sync<kBarSchedFull, kSchedHop>();
    const ItemPlan ip = load_item<item_words<Shape>()>(from_sched);
    // Each consumer warpgroup has read the previous item (long ago: at the start of that item).
    named_barrier_sync<kBarConsEmpty0, kConsHopWg>();
    named_barrier_sync<kBarConsEmpty0 + 1, kConsHopWg>();
    if (lane == 0) store_item<item_words<Shape>()>(to_cons, ip);
    __syncwarp();
    named_barrier_arrive<kBarConsFull0, kConsHopWg>();
    named_barrier_arrive<kBarConsFull0 + 1, kConsHopWg>();
    if (!ip.valid) break;
    if (ip.n_tiles == 0) {  // rows with no key: nothing to load
      named_barrier_arrive<kBarSchedEmpty, kSchedHop>();  // the next item, please
      continue;
    }
    const int kv_head = ip.it.head / group;

    // Lane 0 issues every load; the whole warp asks the scheduler for the next item.
    auto ask_next = [&] {
      __syncwarp();
      named_barrier_arrive<kBarSchedEmpty, kSchedHop>();
    };
    // Consumer warpgroup h's 64 rows of Q, refilled once that warpgroup's last S of the previous
    // item has read them (rows past the tensor's end arrive as zeros).
    auto load_q_half = [&](int h) {
      mbar_wait(bar(q_empty_bar(h)), (q_iter & 1) ^ 1);
      mbar_arrive_expect_tx(bar(q_full_bar(h)), Shape::kQHalfBytes);
#pragma unroll
      for (int c = 0; c < Shape::kQBoxes; ++c) {
        tma_load_3d(sbase + Shape::kOffQ + c * Shape::kBoxBytesQ + h * Shape::kWgRows * Shape::kRowBytes, &gmaps[0],
                    bar(q_full_bar(h)), c * 64, ip.it.head, ip.it.q_begin + ip.it.row0 + h * Shape::kWgRows);
      }
    };
    auto kv_row = [&](int t) { return ip.it.kv_begin + ip.n_begin + t * BN; };
    auto load_k = [&](int t) {
      const uint32_t i = kv_iter + t;
      const int s = i & 1;
      const int row = kv_row(t);
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
      const int row = kv_row(t);
      mbar_wait(bar(kBarVEmpty + s), ((i >> 1) & 1) ^ 1);
      if constexpr (Shape::kFp8) {
        // Released by this arrive (mbarrier.arrive is a release, the transposers' wait an acquire).
        const int keys = ip.it.lk - ip.n_begin - t * BN;
        __stcg(v_valid + s, keys < BN ? keys : BN);
      }
      mbar_arrive_expect_tx(bar(kBarVFull + s), Shape::kVBytes);
      const uint32_t sv = sbase + Shape::kOffV + s * Shape::kVBytes;
#pragma unroll
      for (int c = 0; c < Shape::kVBoxes; ++c) {
        tma_load_3d(sv + c * Shape::kBoxBytesKV, &gmaps[3], bar(kBarVFull + s), c * 64, kv_head, row);
      }
    };
    // Q, then K one tile ahead of V: the consumers issue S(t + 1) before P(t) V(t). The leading
    // warpgroup's Q and the first K go before the other half of Q, which waits for the other
    // warpgroup's last S of the previous item. The next item is asked for after the last K.
    if (lane == 0) {
      load_q_half(0);
      load_k(0);
    }
    if (ip.n_tiles == 1) ask_next();
    if (lane == 0) load_q_half(1);
    for (int t = 0; t < ip.n_tiles; ++t) {
      if (t + 1 < ip.n_tiles) {
        if (lane == 0) load_k(t + 1);
        if (t + 2 == ip.n_tiles) ask_next();
      }
      if (lane == 0) load_v(t);
    }
    ++q_iter;
    kv_iter += ip.n_tiles;
  }
  if constexpr (Shape::kFp8) {
    // The transposing warps' last fill: none (they stop at -1). A plain arrive completes the
    // stage's phase as a fill's expect-tx arrive and its bytes would.
    if (lane == 0) {
      const uint32_t s = kv_iter & 1;
      mbar_wait(bar(kBarVEmpty + s), ((kv_iter >> 1) & 1) ^ 1);
      __stcg(v_valid + s, -1);
      mbar_arrive(bar(kBarVFull + s));
    }
  }
  // The consumers' last "read".
  named_barrier_sync<kBarConsEmpty0, kConsHopWg>();
  named_barrier_sync<kBarConsEmpty0 + 1, kConsHopWg>();
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
