// Writes one warp's normalized output rows and their log-sum-exp, from the accumulator layout
// shared by mma.m16n8k16 and wgmma (see online_softmax.cuh). Rows past the sequence end
// (the tail of the last q tile) are not written.
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace mlakit {
namespace cuda {

// A row's normalization factor 1 / l and its log-sum-exp (m is the running max in log2 units).
// A row with no visible key has l == 0: its output is 0 and its lse -inf.
__device__ __forceinline__ float row_inv_sum(float l) { return l > 0.f ? 1.f / l : 0.f; }
__device__ __forceinline__ float row_lse(float m, float l) {
  return l > 0.f ? (m + log2f(l)) * 0.6931471805599453f : -INFINITY;
}

template <int DVO, typename T>
__device__ __forceinline__ void store_rows(const float (&o)[DVO / 8][4], const float (&m)[2],
                                           const float (&l)[2], T* out_tile, int64_t o_stride,
                                           float* lse_tile, int64_t lse_stride, int warp_row0,
                                           int valid_rows, int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp_row0 + (lane >> 2) + r * 8;
    if (row >= valid_rows) continue;
    const float inv = row_inv_sum(l[r]);
    T* dst = out_tile + static_cast<int64_t>(row) * o_stride + (lane & 3) * 2;
#pragma unroll
    for (int n = 0; n < DVO / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) = pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
    if (lse_tile != nullptr && (lane & 3) == 0) {
      lse_tile[static_cast<int64_t>(row) * lse_stride] = row_lse(m[r], l[r]);
    }
  }
}

// Only the log-sum-exp of one warp's rows (when the output itself goes another way).
__device__ __forceinline__ void store_lse_rows(const float (&m)[2], const float (&l)[2], float* lse_tile,
                                               int64_t lse_stride, int warp_row0, int valid_rows, int lane) {
  if (lse_tile == nullptr || (lane & 3) != 0) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp_row0 + (lane >> 2) + r * 8;
    if (row >= valid_rows) continue;
    lse_tile[static_cast<int64_t>(row) * lse_stride] = row_lse(m[r], l[r]);
  }
}

}  // namespace cuda
}  // namespace mlakit
