// The sm80+ tensor-core ragged prefill kernel (mma.sync + ldmatrix + cp.async double buffering,
// online softmax). V is never padded: the PV product is exactly DVO wide.
//
// A block of 8 warps owns 128 query rows of one (sequence, q head); each warp owns 16 rows and
// keeps its Q fragments in registers. K and V tiles of 64 rows stream through two shared-memory
// stages: the copy of tile t+1 runs while tile t is multiplied.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/ptx.cuh"
#include "contract/prefill_launch.h"
#include "cuda/common/online_softmax.cuh"
#include "cuda/sm80/tile_load.cuh"
#include "cuda/sm80/tile_math.cuh"
#include "cuda/common/tile_store.cuh"
#include "contract/mask_rule.h"
#include "cuda/common/score_transform.cuh"
#include "cuda/common/work_scheduler.cuh"

namespace mlakit {
namespace cuda {
namespace sm80 {

// Query rows per block (16 per warp): 128 measured best on long sequences (64 on small batches,
// where the sm90 kernel runs on Hopper anyway).
constexpr int kSm80BlockM = 128;

template <int DQK_, int DVO_>
struct KernelShape {
  static constexpr int DQK = DQK_;
  static constexpr int DVO = DVO_;
  static constexpr int BM = kSm80BlockM;
  static constexpr int BN = 64;
  static constexpr int WARPS = BM / 16;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int kSmemElems = BM * DQK + 2 * BN * DQK + 2 * BN * DVO;
  static constexpr int kSmemBytes = kSmemElems * 2;
};

template <typename T, typename Shape>
__global__ void __launch_bounds__(Shape::THREADS, 1) prefill_sm80_kernel(const PrefillArgs args) {
  constexpr int DQK = Shape::DQK, DVO = Shape::DVO, BM = Shape::BM, BN = Shape::BN;
  constexpr int THREADS = Shape::THREADS;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + BM * DQK;        // 2 stages
  T* sV = sK + 2 * BN * DQK;    // 2 stages

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  // PDL (docs/sm90-kernel.md): the schedule, q/k/v and out may belong to the previous kernel in the
  // stream until it completes; every thread waits before its first global access.
  pdl_wait();
  const ScheduleView sched = ScheduleView::from(args);
  const plan::ScheduleHeader hdr = *sched.header;
  const int num_heads = args.num_qo_heads;
  const int group = num_heads / args.num_kv_heads;
  const int total_work = hdr.num_tiles * num_heads;
  const ScoreTransform tf = ScoreTransform::from(hdr);
  const bool soft_cap = tf.capped();
  const LdmatrixOffsets<DQK> k_off = k_offsets<DQK>(lane);
  const LdmatrixOffsets<DVO> v_off = v_offsets<DVO>(lane);
  const uint32_t sK_addr = smem_addr(sK), sV_addr = smem_addr(sV);

  const T* q_all = static_cast<const T*>(args.q);
  const T* k_all = static_cast<const T*>(args.k);
  const T* v_all = static_cast<const T*>(args.v);
  // Split K: key columns [0, DQK - k_rope_dim) from k, the rest from k_rope. With
  // k_rope_dim == 0 every chunk comes from k and the rope pointer is never dereferenced. The
  // rope strides are read from the kernel parameters where used (no extra live registers: this
  // kernel sits at the 255-register limit).
  const T* kr_all = static_cast<const T*>(args.k_rope);
  T* o_all = static_cast<T*>(args.out);

  for (int w = blockIdx.x; w < total_work; w += gridDim.x) {
    // This block's last item: the next kernel's blocks may be scheduled (PDL; they still wait
    // for this grid to complete before touching memory).
    if (w + static_cast<int>(gridDim.x) >= total_work) pdl_launch_dependents();
    const WorkItem it = sched.item(w, num_heads, BM);
    const int rows = min(BM, it.lq - it.row0);
    const rule::MaskRule<int> mp{it.lq, it.lk, hdr.causal != 0, hdr.window_left};
    const rule::KvRange<int> span = mp.tile_range(it.row0, rows);
    const int n_begin = (span.lo / BN) * BN;
    const int num_kv_tiles = span.empty() ? 0 : (span.hi - n_begin + BN - 1) / BN;
    const int kv_head = it.head / group;

    const T* q_tile = q_all + static_cast<int64_t>(it.q_begin + it.row0) * args.q_stride_tok +
                      static_cast<int64_t>(it.head) * args.q_stride_head;
    const T* k_seq = k_all + static_cast<int64_t>(it.kv_begin) * args.k_stride_tok +
                     static_cast<int64_t>(kv_head) * args.k_stride_head;
    const T* v_seq = v_all + static_cast<int64_t>(it.kv_begin) * args.v_stride_tok +
                     static_cast<int64_t>(kv_head) * args.v_stride_head;
    const int k_split_chunks = (DQK - args.k_rope_dim) / 8;
    // Row `n` of this sequence's RoPE key, recomputed at each use (fewer live registers).
    auto kr_row = [&](int n) {
      return kr_all + static_cast<int64_t>(it.kv_begin + n) * args.kr_stride_tok +
             static_cast<int64_t>(kv_head) * args.kr_stride_head;
    };

    float o[DVO / 8][4];
#pragma unroll
    for (int n = 0; n < DVO / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    RowSoftmax<BN / 8> sm;
    sm.init();

    if (num_kv_tiles > 0) {
      load_tile_async<BM, DQK, THREADS>(sQ, q_tile, args.q_stride_tok, rows, tid);
      load_k_tile_async<BN, DQK, THREADS>(sK, k_seq + static_cast<int64_t>(n_begin) * args.k_stride_tok,
                                          args.k_stride_tok,
                                          kr_row(n_begin),
                                          args.kr_stride_tok, k_split_chunks, it.lk - n_begin, tid);
      load_tile_async<BN, DVO, THREADS>(sV, v_seq + static_cast<int64_t>(n_begin) * args.v_stride_tok,
                                        args.v_stride_tok, it.lk - n_begin, tid);
      cp_async_commit();
    }

    uint32_t qf[DQK / 16][4];
    const int row_in_seq[2] = {it.row0 + warp * 16 + (lane >> 2), it.row0 + warp * 16 + (lane >> 2) + 8};

    for (int t = 0; t < num_kv_tiles; ++t) {
      const int stage = t & 1;
      // Tile t has landed, and every warp is done with tile t-1 (whose stage we refill next).
      cp_async_wait<0>();
      __syncthreads();
      if (t == 0) load_q_fragments<DQK>(qf, sQ, warp * 16, lane);
      if (t + 1 < num_kv_tiles) {
        const int n_next = n_begin + (t + 1) * BN;
        load_k_tile_async<BN, DQK, THREADS>(sK + (stage ^ 1) * BN * DQK,
                                            k_seq + static_cast<int64_t>(n_next) * args.k_stride_tok,
                                            args.k_stride_tok,
                                            kr_row(n_next),
                                            args.kr_stride_tok, k_split_chunks, it.lk - n_next, tid);
        load_tile_async<BN, DVO, THREADS>(sV + (stage ^ 1) * BN * DVO,
                                          v_seq + static_cast<int64_t>(n_next) * args.v_stride_tok,
                                          args.v_stride_tok, it.lk - n_next, tid);
        cp_async_commit();
      }
      const int n0 = n_begin + t * BN;
      float s[BN / 8][4];
      compute_scores<DQK, BN, T>(s, qf, sK_addr + stage * BN * DQK * 2, k_off);
      float alpha[2];
      const bool full = mp.all_visible(it.row0, BM, n0, BN);
      if (soft_cap) {
        if (full) sm.template update<false, true>(s, alpha, tf, mp, row_in_seq, n0, lane);
        else sm.template update<true, true>(s, alpha, tf, mp, row_in_seq, n0, lane);
      } else {
        if (full) sm.template update<false, false>(s, alpha, tf, mp, row_in_seq, n0, lane);
        else sm.template update<true, false>(s, alpha, tf, mp, row_in_seq, n0, lane);
      }
      rescale_rows(o, alpha);
      accumulate_pv<DVO, BN, T>(o, s, sV_addr + stage * BN * DVO * 2, v_off);
    }

    float l_total[2];
    sm.finish(l_total);
    T* out_tile = o_all + static_cast<int64_t>(it.q_begin + it.row0) * args.o_stride_tok +
                  static_cast<int64_t>(it.head) * args.o_stride_head;
    float* lse_tile = args.lse == nullptr
                          ? nullptr
                          : args.lse + static_cast<int64_t>(it.q_begin + it.row0) * args.lse_stride_tok +
                                static_cast<int64_t>(it.head) * args.lse_stride_head;
    store_rows<DVO>(o, sm.m, l_total, out_tile, args.o_stride_tok, lse_tile, args.lse_stride_tok,
                    warp * 16, rows, lane);
    // The next work item overwrites the shared tiles.
    __syncthreads();
  }
}

// Host side: sets the shared-memory limit once per instantiation and launches.
template <typename T, int DQK, int DVO>
void launch_prefill_sm80(const PrefillArgs& args, int grid_blocks, cudaStream_t stream);

template <typename T, int DQK, int DVO>
int blocks_per_sm_sm80();

}  // namespace sm80
}  // namespace cuda
}  // namespace mlakit
