// Online (streaming) softmax for one warp's rows, in the accumulator layout that mma.m16n8k16 and
// wgmma share (per warp: lane l holds rows l/4 and l/4 + 8, columns 2 (l%4) and 2 (l%4) + 1 of each
// 8-wide key block), so the sm80 and sm90 kernels both use it. Scores are kept in the log2 domain
// (x * sm_scale * log2 e) so each probability is a single ex2. A row that has seen no visible key
// has max -inf; exponentials then use offset 0 so nothing becomes NaN, and its sum stays 0.
#pragma once

#include <cmath>

#include "cuda/common/ptx.cuh"
#include "common/mask_rule.h"
#include "cuda/common/score_transform.cuh"

// Row max and row sum as kParts independent chains per row, combined at the end. Why: the
// softmax sits on each consumer's critical path between S landing and the next S issue, and
// with two warps per scheduler nothing hides a 32-deep chain of dependent FMNMX (or FADD).
// The max is exact in any order, so MAX_PARTS changes no bit; SUM_PARTS changes the rounding
// of the row sum (deterministic either way). 1 = one chain (the order before 2026-12-03).
#ifndef MLAKIT_SOFTMAX_MAX_PARTS
#define MLAKIT_SOFTMAX_MAX_PARTS 4
#endif
#ifndef MLAKIT_SOFTMAX_SUM_PARTS
#define MLAKIT_SOFTMAX_SUM_PARTS 1
#endif
// POLY_EXP2_EVERY = k > 0: of each thread's 8-wide key blocks, every k-th (n % k == k - 1)
// exponentiates with poly_exp2 on the FMA pipe instead of MUFU.EX2, so the two units share the
// work (FlashAttention-4's split). 0: all on MUFU.
#ifndef MLAKIT_SOFTMAX_POLY_EXP2_EVERY
#define MLAKIT_SOFTMAX_POLY_EXP2_EVERY 0
#endif

namespace mlakit {
namespace cuda {

// Combines kParts partial values pairwise (a tree, log2(kParts) deep).
template <int kParts, typename Op>
__device__ __forceinline__ float combine_parts(float (&v)[kParts], Op op) {
#pragma unroll
  for (int w = 1; w < kParts; w *= 2) {
#pragma unroll
    for (int i = 0; i + w < kParts; i += 2 * w) v[i] = op(v[i], v[i + w]);
  }
  return v[0];
}

template <int NT>  // 8-wide key tiles per block_n
struct RowSoftmax {
  float m[2];  // running max (log2 domain) of rows lane/4 and lane/4 + 8
  float l[2];  // running sum of this lane's share of the row

  __device__ __forceinline__ void init() {
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }

  // Turns raw scores into probabilities in place and returns the factor by which the output
  // accumulated so far must be rescaled, per row. `row` = positions of this lane's two rows in the
  // sequence, `col0` = position of key 0 of the tile. Without a soft cap the max is taken on raw
  // scores and scaling folds into one FFMA per exponential.
  template <bool kMask, bool kSoftCap>
  __device__ __forceinline__ void update(float (&s)[NT][4], float (&alpha)[2],
                                         const ScoreTransform& tf, const rule::MaskRule<int>& mp,
                                         const int (&row)[2], int col0, int lane) {
    constexpr int kMaxParts = NT % MLAKIT_SOFTMAX_MAX_PARTS == 0 ? MLAKIT_SOFTMAX_MAX_PARTS : 1;
    constexpr int kSumParts = NT % MLAKIT_SOFTMAX_SUM_PARTS == 0 ? MLAKIT_SOFTMAX_SUM_PARTS : 1;
    float mxp[2][kMaxParts];  // set from the first key blocks, then max-accumulated
    // Masking: each row's visible keys [lo, hi) once, relative to this lane's first column, so
    // each element costs two compares against a compile-time offset (not the whole rule).
    int lo[2] = {0, 0}, hi[2] = {0, 0};
    if (kMask) {
      const int lane_col0 = col0 + (lane & 3) * 2;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const rule::KvRange<int> vis = mp.row_range(row[r]);
        lo[r] = vis.lo - lane_col0;
        hi[r] = vis.hi - lane_col0;
      }
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e];
        if (kSoftCap) x = tf.cap_log2(x);
        if (kMask) {
          const int c = n * 8 + (e & 1);  // column offset from lane_col0
          if (c < lo[e >> 1] || c >= hi[e >> 1]) x = -INFINITY;
        }
        s[n][e] = x;
        float& part = mxp[e >> 1][n % kMaxParts];
        part = (n < kMaxParts && (e & 1) == 0) ? x : fmaxf(part, x);
      }
    }
    auto max_op = [](float u, float v) { return fmaxf(u, v); };
    float mx[2] = {combine_parts<kMaxParts>(mxp[0], max_op), combine_parts<kMaxParts>(mxp[1], max_op)};
    const float scale = kSoftCap ? 1.f : tf.scale_log2;
    float neg_offset[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r] * scale);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      alpha[r] = fast_exp2(m[r] - m_use);
      m[r] = m_new;
      neg_offset[r] = -m_use;
    }
    float sump[2][kSumParts];
#pragma unroll
    for (int i = 0; i < kSumParts; ++i) sump[0][i] = sump[1][i] = 0.f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float arg = fmaf(s[n][e], scale, neg_offset[e >> 1]);
        constexpr int kPoly = MLAKIT_SOFTMAX_POLY_EXP2_EVERY;
        const float p = (kPoly > 0 && n % (kPoly > 0 ? kPoly : 1) == kPoly - 1) ? poly_exp2(arg) : fast_exp2(arg);
        s[n][e] = p;
        sump[e >> 1][n % kSumParts] += p;
      }
    }
    auto add_op = [](float u, float v) { return u + v; };
    const float sum[2] = {combine_parts<kSumParts>(sump[0], add_op), combine_parts<kSumParts>(sump[1], add_op)};
    l[0] = l[0] * alpha[0] + sum[0];
    l[1] = l[1] * alpha[1] + sum[1];
  }

  // Full row sums (the four lanes of a row each hold a quarter).
  __device__ __forceinline__ void finish(float (&total)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float t = l[r];
      t += __shfl_xor_sync(0xffffffffu, t, 1);
      t += __shfl_xor_sync(0xffffffffu, t, 2);
      total[r] = t;
    }
  }
};

template <int NTO>
__device__ __forceinline__ void rescale_rows(float (&o)[NTO][4], const float (&alpha)[2]) {
#pragma unroll
  for (int n = 0; n < NTO; ++n) {
    o[n][0] *= alpha[0];
    o[n][1] *= alpha[0];
    o[n][2] *= alpha[1];
    o[n][3] *= alpha[1];
  }
}

}  // namespace cuda
}  // namespace mlakit
