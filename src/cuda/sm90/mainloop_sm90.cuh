// The consumers' matrix products and softmax step: S = Q K^T and O += P V issued with wgmma from
// the swizzled shared tiles, P packed from the S accumulators, the (masked) online softmax, and
// the clearing of V rows past a sequence.
#pragma once

#include "contract/mask_rule.h"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/score_transform.cuh"
#include "cuda/sm90/kernel_layout_sm90.cuh"
#include "cuda/sm90/ptx_sm90.cuh"

namespace mlakit {
namespace cuda {
namespace sm90 {

// S (this warpgroup's 64 rows x 128 keys) = Q K^T over Dqk, from the swizzled shared tiles.
template <typename T, typename Shape>
__device__ __forceinline__ void issue_qk(float (&s)[64], uint32_t q_rows_base, uint32_t k_stage) {
  // Built once, then advanced per k-step (smem_desc_advance).
  const uint64_t da0 = smem_desc_sw128(q_rows_base, 16, 1024);
  const uint64_t db0 = smem_desc_sw128(k_stage, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < Shape::DQK / 16; ++kk) {
    const int box = kk / 4;
    const uint32_t k_off = (kk % 4) * 32;  // 16 columns of 2 bytes inside the 128-byte swizzled row
    const uint64_t da = smem_desc_advance(da0, box * Shape::kBoxBytesQ + k_off);
    const uint64_t db = smem_desc_advance(db0, box * Shape::kBoxBytesKV + k_off);
    wgmma_m64n128k16_ss<T>(s, da, db, kk > 0 ? 1 : 0);
  }
}

// O (64 rows x 128 value columns) += P V, P from registers (kk-th 16 keys in p[kk]).
template <typename T, typename Shape>
__device__ __forceinline__ void issue_pv(float (&o)[64], const uint32_t (&p)[Shape::BN / 16][4], uint32_t v_stage) {
  const uint64_t db0 = smem_desc_sw128(v_stage, Shape::kBoxBytesKV, 1024);
#pragma unroll
  for (int kk = 0; kk < Shape::BN / 16; ++kk) {
    // Keys 16kk..16kk+15 start 16 rows (2048 bytes) further; the next 64 value columns live in
    // the next TMA box (LBO), the next 8 keys 1024 bytes on (SBO).
    const uint64_t db = smem_desc_advance(db0, kk * 16 * 128);
    wgmma_m64n128k16_rs_mnb<T>(o, p[kk], db, 1);
  }
}

// V rows past the sequence end in an item's last kv tile (`valid` < BN rows hold keys; the caller
// checks, as it also keeps the phases): P is 0 there, but 0 * inf would be NaN, so they are zeroed
// before the P V. The first consumer warpgroup clears all of them and tells the second through the
// stage's V-cleared mbarrier (`cleared`; the second waits on it with `parity`), so the first never
// waits for the second. Each fill of a stage is released by both warpgroups before the next, so
// the barrier's phases cannot run ahead of the second's waits.
template <typename Shape>
__device__ __forceinline__ void clear_v_rows_past(unsigned char* smem, uint32_t stage, int valid, int cw, int tid,
                                                  uint32_t cleared, uint32_t parity) {
  constexpr int BN = Shape::BN;
  if (cw == 0) {
    const int chunks = (BN - valid) * Shape::kVBoxes * 8;  // 16-byte chunks to clear
    unsigned char* sv = smem + Shape::kOffV + stage * Shape::kVBytes;
    for (int c = tid; c < chunks; c += 128) {
      const int row = valid + c / (Shape::kVBoxes * 8);
      const int rem = c % (Shape::kVBoxes * 8);
      *reinterpret_cast<uint4*>(sv + (rem / 8) * Shape::kBoxBytesKV + row * 128 + (rem % 8) * 16) =
          make_uint4(0, 0, 0, 0);
    }
    fence_proxy_async_smem();
    named_barrier_sync<kBarVClear, 128>();
    if (tid == 0) mbar_arrive(cleared);
  } else {
    mbar_wait(cleared, parity);
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

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
