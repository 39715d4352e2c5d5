// e4m3 only: V transposed in shared memory for O += P V. FP8 wgmma reads both operands K-major,
// and P V reduces over keys, so its B operand must hold each value column's keys contiguously;
// V arrives token-major ([keys][values], as TMA copies it from [T, H, Dvo]). Warps 2 and 3 of
// warpgroup 0 (otherwise idle) rewrite each V stage into a transposed stage (FlashAttention-3
// does this in its producer warpgroup), per block of 16 keys x 32 values:
//   ldmatrix .x4 .trans (b16): lane (q, c) = (lane / 4, lane % 4) receives, per 8x8 matrix,
//     values 2q, 2q + 1 of keys 2c, 2c + 1: bytes [V[2c][2q], V[2c][2q+1], V[2c+1][2q], V[2c+1][2q+1]]
//     (keys 0-7 in r0, 8-15 in r1 for values 0-15; r2, r3 the same for values 16-31);
//   prmt picks per value column the four keys 2c, 2c+1, 8+2c, 9+2c: prmt(r0, r1, 0x6420) for value
//     2q, 0x7531 for value 2q + 1;
//   stmatrix .x4 (b16) writes them as bytes 4c..4c+3 of the value column's row: so byte 4c + i of
//     a 16-key group holds key 2c + (i & 1) + 8 (i >> 1), a fixed permutation of the keys in each
//     group of 16. pack_p (mainloop_sm90.cuh) packs P's registers in the same order (the
//     accumulator's columns 2c, 2c+1 of two adjacent 8-key blocks), so the product is unchanged
//     and P needs no shuffle (FlashInfer's and FlashAttention-3's key order, (2,2,4):(1,8,2)).
// The transposed stage is [Dvo rows][128 keys], 128-byte swizzled: wgmma's K-major operand, as K's.
// Bank conflicts: the ldmatrix rows are 8 consecutive keys of one 64-byte-swizzled box (8 distinct
// 16-byte bank groups); a stmatrix matrix's 8 rows take value columns 2i (rows i < 4) or 2i + 1
// (rows i >= 4) through a per-lane prmt selector, 8 distinct (column % 8), so 8 distinct bank
// groups under the 128-byte swizzle (all even or all odd columns would give 4: a 2-way conflict).
// Keys past the sequence's end (the last tile of an item; the producer says how many are in it)
// are zeroed on the way: P is 0 there, but 0 x NaN (0x7f) would be NaN.
#pragma once

#include "cuda/common/ptx.cuh"
#include "cuda/sm90/kernel_layout_sm90.cuh"
#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/vtranspose_layout.h"

namespace mlakit {
namespace cuda {
namespace sm90 {

// One V stage (e4m3, [128 keys][Dvo] in 64-value boxes of 64-byte swizzled rows) into its
// transposed stage; warp `w` (0 / 1) of the two takes key groups [4w, 4w + 4), `keys` of the 128
// belong to the sequence. Addresses, selectors and masks: vtranspose_layout.h.
template <typename Shape>
__device__ __forceinline__ void transpose_v_stage(uint32_t v_stage, uint32_t vt_stage, int keys, int w, int lane) {
  static_assert(Shape::kFp8 && Shape::BN == 128 && Shape::DVO == 128 && Shape::kBoxBytesKV == kVtRawBoxBytes,
                "e4m3 V tiles of 128 keys x 128 values");
  const VtLane l = vt_lane(lane);
#pragma unroll
  for (int jj = 0; jj < 4; ++jj) {
    const int j = 4 * w + jj;  // key group: keys 16j .. 16j + 15
    uint32_t keep_lo = 0xffffffffu, keep_hi = 0xffffffffu;
    if (keys < Shape::BN) vt_keep_masks(l, j, keys, &keep_lo, &keep_hi);  // the item's last tile
#pragma unroll
    for (int u = 0; u < Shape::DVO / 32; ++u) {  // values 32u .. 32u + 31
      uint32_t r0, r1, r2, r3;
      ldmatrix_x4_trans(v_stage + vt_src_offset(l, j, u), r0, r1, r2, r3);
      r0 &= keep_lo;
      r2 &= keep_lo;
      r1 &= keep_hi;
      r3 &= keep_hi;
      stmatrix_x4(vt_stage + vt_dst_offset(l, j, u), __byte_perm(r0, r1, l.sel_a), __byte_perm(r0, r1, l.sel_b),
                  __byte_perm(r2, r3, l.sel_a), __byte_perm(r2, r3, l.sel_b));
    }
  }
}

// Warps 2 and 3 of warpgroup 0 (`w` = 0, 1), e4m3 only: every V fill, in the producer's order,
// into its transposed stage once the consumers have released that stage's previous contents;
// the raw stage is released to the producer at once. Ends at the producer's fill of none.
template <typename Shape>
__device__ __forceinline__ void transpose_v_warp(uint32_t sbase, const int* v_valid, int w, int lane) {
  auto bar = [&](int i) { return sbase + Shape::kOffBars + 8 * i; };
  for (uint32_t i = 0;; ++i) {
    const uint32_t s = i & 1, parity = (i >> 1) & 1;
    mbar_wait(bar(kBarVFull + s), parity);
    const int keys = __ldcg(v_valid + s);  // written before the fill's arrive (producer_sm90.cuh)
    if (keys < 0) break;
    mbar_wait(bar(kBarVtEmpty + s), parity ^ 1);  // the consumers' P V of fill i - 2 is done
    transpose_v_stage<Shape>(sbase + Shape::kOffV + s * Shape::kVBytes, sbase + Shape::kOffVt + s * Shape::kVtBytes,
                             keys, w, lane);
    fence_proxy_async_smem();  // ordinary stores, read next by wgmma (the async proxy)
    __syncwarp();
    if (lane == 0) {
      mbar_arrive(bar(kBarVtFull + s));
      mbar_arrive(bar(kBarVEmpty + s));
    }
  }
}

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
