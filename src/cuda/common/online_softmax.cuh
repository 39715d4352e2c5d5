// Online (streaming) softmax for one warp's rows, in the accumulator layout that mma.m16n8k16 and
// wgmma share (per warp: lane l holds rows l/4 and l/4 + 8, columns 2 (l%4) and 2 (l%4) + 1 of each
// 8-wide key block), so the sm80 and sm90 kernels both use it. Scores are kept in the log2 domain
// (x * sm_scale * log2 e) so each probability is a single ex2. A row that has seen no visible key
// has max -inf; exponentials then use offset 0 so nothing becomes NaN, and its sum stays 0.
#pragma once

#include <cmath>

#include "cuda/common/ptx.cuh"
#include "contract/mask_rule.h"
#include "cuda/common/score_transform.cuh"

namespace mlakit {
namespace cuda {

// The slack softmax's reference max: the running max m moves to a tile's max mx only when mx
// passes it by more than `slack` (in the maxima's units). From -inf it always moves to a finite
// mx: -inf + slack is -inf.
__device__ __forceinline__ float slack_max(float m, float mx, float slack) {
  const float n = fmaxf(m, mx);
  return n <= m + slack ? m : n;
}

// kPLog2Offset: probabilities are 2^(x - max + kPLog2Offset) (the sm90 e4m3 kernel's P scale,
// kernel_layout_sm90.cuh); m stays the plain running max.
// kSlack > 0: the reference max m moves only when a tile's max passes it by more than kSlack
// (log2 domain), so a probability stays below 2^kSlack and most tiles after a row's first return
// alpha = 1 exactly, letting the caller skip rescaling O (rescale_rows_if_needed). Exact either
// way: O, l and m stay one consistent triple; only 16-bit P can take the 2^kSlack headroom.
template <int NT, int kPLog2Offset = 0, int kSlack = 0>  // 8-wide key tiles per block_n
struct RowSoftmax {
  float m[2];  // reference max (log2 domain) of rows lane/4 and lane/4 + 8: the running max, or
               // with kSlack at most kSlack below it
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
    float mx[2] = {-INFINITY, -INFINITY};
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
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    }
    const float scale = kSoftCap ? 1.f : tf.scale_log2;
    float neg_offset[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      float m_new;
      if constexpr (kSlack > 0) {
        m_new = slack_max(m[r], mx[r] * scale, static_cast<float>(kSlack));
      } else {
        m_new = fmaxf(m[r], mx[r] * scale);
      }
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      alpha[r] = fast_exp2(m[r] - m_use);
      m[r] = m_new;
      if constexpr (kPLog2Offset != 0) {
        neg_offset[r] = static_cast<float>(kPLog2Offset) - m_use;
      } else {
        neg_offset[r] = -m_use;
      }
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = fast_exp2(fmaf(s[n][e], scale, neg_offset[e >> 1]));
        s[n][e] = p;
        sum[e >> 1] += p;
      }
    }
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

// Whether any row of the warp (a lane's two rows, in every lane) has a factor other than 1: the
// warp-uniform test before a rescale the slack softmax usually makes unneeded.
__device__ __forceinline__ bool warp_factor_moved(const float (&f)[2]) {
  return __any_sync(0xffffffffu, f[0] != 1.f || f[1] != 1.f);
}

// With a slack softmax most tiles leave every row's factor at 1: the warp skips the multiplies
// then (a warp-uniform branch; the vote costs two instructions, the rescale 4 NTO).
template <int NTO>
__device__ __forceinline__ void rescale_rows_if_needed(float (&o)[NTO][4], const float (&alpha)[2]) {
  if (warp_factor_moved(alpha)) rescale_rows(o, alpha);
}

}  // namespace cuda
}  // namespace mlakit
