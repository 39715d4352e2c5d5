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
#include "cuda/sm90/smem_desc.h"
#include "cuda/sm90/vtranspose_layout.h"

namespace mlakit {
namespace cuda {
namespace sm90 {

// A warpgroup's Q descriptors, one per k-step of S, built once before its first item. Built
// inside issue_qk from Q's address, ptxas recomputed every k-step's low word at the head of each
// kv tile (21 of the d192 loop's 495 instructions a tile, with the shared-memory base read again);
// held in registers behind an empty asm, they are built once and moved into the wgmma's uniform
// registers (sm90-loop-path: 474).
template <typename Shape>
struct QDescs {
  static constexpr int kSteps = Shape::DQK / Shape::kMmaK;
  uint32_t lo[kSteps];  // each k-step's descriptor, low word
  uint32_t hi;          // the high word, the same for every k-step
};

template <typename E, typename Shape>
__device__ __forceinline__ QDescs<Shape> make_q_descs(uint32_t q_rows_base) {
  constexpr uint32_t kSbo = 8 * Shape::kRowBytes;  // the next 8 rows
  const uint64_t da0 = E::kFp8 ? smem_desc_sw64(q_rows_base, 16, kSbo) : smem_desc_sw128(q_rows_base, 16, kSbo);
  QDescs<Shape> d;
  d.hi = static_cast<uint32_t>(da0 >> 32);
#pragma unroll
  for (int kk = 0; kk < QDescs<Shape>::kSteps; ++kk) {
    const int box = kk / Shape::kKStepsPerBox;
    const uint32_t k_off = (kk % Shape::kKStepsPerBox) * 32;  // 32 bytes of k inside the swizzled row
    d.lo[kk] = static_cast<uint32_t>(smem_desc_advance(da0, box * Shape::kBoxBytesQ + k_off));
    asm volatile("" : "+r"(d.lo[kk]));  // opaque: ptxas cannot rebuild it from the address
  }
  return d;
}

// S (this warpgroup's 64 rows x 128 keys) = Q K^T over Dqk, from the swizzled shared tiles: 16-bit
// in 128-byte rows (k-steps of 16 columns), e4m3 in 64-byte rows (k-steps of 32 columns); either
// way a k-step is 32 bytes of a row.
template <typename E, typename Shape>
__device__ __forceinline__ void issue_qk(float (&s)[64], const QDescs<Shape>& qd, uint32_t k_stage) {
  constexpr uint32_t kSbo = 8 * Shape::kRowBytes;  // the next 8 rows
  // K's descriptor built once, then advanced per k-step (smem_desc_advance).
  const uint64_t db0 = E::kFp8 ? smem_desc_sw64(k_stage, 16, kSbo) : smem_desc_sw128(k_stage, 16, kSbo);
#pragma unroll
  for (int kk = 0; kk < Shape::DQK / Shape::kMmaK; ++kk) {
    const int box = kk / Shape::kKStepsPerBox;
    const uint32_t k_off = (kk % Shape::kKStepsPerBox) * 32;
    const uint64_t da = (static_cast<uint64_t>(qd.hi) << 32) | qd.lo[kk];
    const uint64_t db = smem_desc_advance(db0, box * Shape::kBoxBytesKV + k_off);
    if constexpr (E::kFp8) {
      wgmma_m64n128k32_ss_e4m3(s, da, db, kk > 0 ? 1 : 0);
    } else {
      wgmma_m64n128k16_ss<typename E::TIn>(s, da, db, kk > 0 ? 1 : 0);
    }
  }
}

// O (64 rows x 128 value columns) += P V, P from registers (kk-th k-step's keys in p[kk]), V of
// kv stage `stage`.
template <typename E, typename Shape>
__device__ __forceinline__ void issue_pv(float (&o)[64], const uint32_t (&p)[Shape::kPvSteps][4], uint32_t sbase,
                                         uint32_t stage) {
  if constexpr (E::kFp8) {
    // V transposed (vtranspose_sm90.cuh): [128 value rows][128 keys], 128-byte swizzled, K-major
    // like K: a k-step is 32 keys (bytes) of each row, the next 8 value rows 1024 bytes on.
    const uint64_t db0 = smem_desc_sw128(sbase + Shape::kOffVt + stage * Shape::kVtBytes, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < Shape::kPvSteps; ++kk) {
      wgmma_m64n128k32_rs_e4m3(o, p[kk], smem_desc_advance(db0, kk * 32), 1);
    }
  } else {
    const uint64_t db0 = smem_desc_sw128(sbase + Shape::kOffV + stage * Shape::kVBytes, Shape::kBoxBytesKV, 1024);
#pragma unroll
    for (int kk = 0; kk < Shape::kPvSteps; ++kk) {
      // Keys 16kk..16kk+15 start 16 rows (2048 bytes) further; the next 64 value columns live in
      // the next TMA box (LBO), the next 8 keys 1024 bytes on (SBO).
      const uint64_t db = smem_desc_advance(db0, kk * 16 * 128);
      wgmma_m64n128k16_rs_mnb<typename E::TIn>(o, p[kk], db, 1);
    }
  }
}

// 16-bit V rows past the sequence end in an item's last kv tile (`valid` < BN rows hold keys; the
// caller checks, as it also keeps the phases; e4m3 V is cleared by its transpose): P is 0 there, but 0 * inf would be NaN, so they are zeroed
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
// 16-bit: per 16 keys, the accumulator's pairs as they are (the m16n8k16 A layout).
// e4m3: per 32 keys, lane (g, c) holds columns 2c, 2c + 1 of each 8-key block; the FP8 A operand
// reads a register's 4 bytes as 4 consecutive k. Packing the columns 2c, 2c+1, 8+2c, 9+2c of rows g
// and g + 8 into one register each puts key 2c + (i & 1) + 8 (i >> 1) at k = 4c + i of its 16-key
// group: the order the V transpose stores the keys in (vtranspose_sm90.cuh), so no shuffle.
template <typename E, int BN>
__device__ __forceinline__ void pack_p(uint32_t (&p)[BN / (E::kFp8 ? 32 : 16)][4], const float (&s)[BN / 8][4]) {
  if constexpr (E::kFp8) {
    // Register r's bytes b = 0..3 (vtranspose_layout.h, p_acc_block / p_acc_elem): r = 0 takes
    // s[4kk][0..1], s[4kk + 1][0..1]; r = 1 the same for row g + 8; r = 2, 3 the blocks 4kk + 2, + 3.
#pragma unroll
    for (int kk = 0; kk < BN / 32; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        p[kk][r] = pack4_e4m3(s[4 * kk + p_acc_block(r, 0)][p_acc_elem(r, 0)], s[4 * kk + p_acc_block(r, 1)][p_acc_elem(r, 1)],
                              s[4 * kk + p_acc_block(r, 2)][p_acc_elem(r, 2)], s[4 * kk + p_acc_block(r, 3)][p_acc_elem(r, 3)]);
      }
    }
  } else {
    using T = typename E::TIn;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      p[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      p[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      p[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      p[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  }
}

template <int BN, typename Softmax>
__device__ __forceinline__ void softmax_step(Softmax& sm, float (&s)[BN / 8][4], float (&alpha)[2],
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
