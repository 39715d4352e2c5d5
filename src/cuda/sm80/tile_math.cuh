// Warp-level tensor-core math for one warp's 16 query rows: S = Q K^T and O += P V, with
// operands fetched from swizzled shared tiles by ldmatrix. Fragment layouts follow PTX's
// mma.m16n8k16: lane l holds rows l/4 and l/4+8, columns 2*(l%4) and 2*(l%4)+1 of each 8-wide tile.
#pragma once

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/sm80/smem_layout.cuh"

namespace mlakit {
namespace cuda {
namespace sm80 {

// Q rows [row0, row0 + 16) as A fragments, one per 16-wide k step; kept in registers because
// every kv tile reuses them.
template <int DQK, typename T>
__device__ __forceinline__ void load_q_fragments(uint32_t (&qf)[DQK / 16][4], const T* sQ, int row0,
                                                 int lane) {
  const int row = row0 + (lane & 15);
#pragma unroll
  for (int ks = 0; ks < DQK / 16; ++ks) {
    const int chunk = ks * 2 + (lane >> 4);
    ldmatrix_x4(smem_addr(sQ + SwizzledRows<DQK>::offset(row, chunk)), qf[ks][0], qf[ks][1],
                qf[ks][2], qf[ks][3]);
  }
}

// s[n][*] = scores of this warp's rows against keys [8n, 8n + 8) of the tile.
template <int DQK, int BN, typename T>
__device__ __forceinline__ void compute_scores(float (&s)[BN / 8][4],
                                               const uint32_t (&qf)[DQK / 16][4], const T* sK,
                                               int lane) {
#pragma unroll
  for (int n = 0; n < BN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
  const int m = lane >> 3;  // which of the four 8x8 matrices this lane addresses
  const int key_in_pair = (lane & 7) + (m >> 1) * 8;
  const int k_half = m & 1;
#pragma unroll
  for (int ks = 0; ks < DQK / 16; ++ks) {
#pragma unroll
    for (int np = 0; np < BN / 16; ++np) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(smem_addr(sK + SwizzledRows<DQK>::offset(np * 16 + key_in_pair, ks * 2 + k_half)),
                  b0, b1, b2, b3);
      mma_16816<T>(s[2 * np], qf[ks], b0, b1);
      mma_16816<T>(s[2 * np + 1], qf[ks], b2, b3);
    }
  }
}

// o += P V where P (probabilities, this warp's rows x BN keys) is still in the score registers:
// the accumulator layout of S is exactly the A-fragment layout PV needs, after packing to 16 bits.
template <int DVO, int BN, typename T>
__device__ __forceinline__ void accumulate_pv(float (&o)[DVO / 8][4], const float (&p)[BN / 8][4],
                                              const T* sV, int lane) {
  const int m = lane >> 3;
  const int key_off = (lane & 7) + (m & 1) * 8;
  const int d_half = m >> 1;
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    uint32_t a[4];
    a[0] = pack2<T>(p[2 * kk][0], p[2 * kk][1]);
    a[1] = pack2<T>(p[2 * kk][2], p[2 * kk][3]);
    a[2] = pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int dp = 0; dp < DVO / 16; ++dp) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4_trans(
          smem_addr(sV + SwizzledRows<DVO>::offset(kk * 16 + key_off, dp * 2 + d_half)), b0, b1,
          b2, b3);
      mma_16816<T>(o[2 * dp], a, b0, b1);
      mma_16816<T>(o[2 * dp + 1], a, b2, b3);
    }
  }
}

}  // namespace sm80
}  // namespace cuda
}  // namespace mlakit
