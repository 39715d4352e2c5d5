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

// Per-lane byte offsets into a swizzled [rows][D] tile for ldmatrix.x4 reads whose 8x8 matrices
// sit at rows (row_in_16 + 16 i) and logical chunks (2 j + chunk_half). The swizzle only XORs the
// low 3 chunk bits with row & 7 = lane & 7, so for a fixed lane the physical chunk of logical
// chunk 2j + h depends only on j & 3: four offsets cover every (i, j), and the rest of the address
// is a compile-time immediate. This keeps address arithmetic out of the inner loops.
template <int D>
struct LdmatrixOffsets {
  uint32_t off[4];
  __device__ __forceinline__ LdmatrixOffsets(int row_in_16, int chunk_half, int lane) {
    const int x = chunk_half ^ (lane & 7);
#pragma unroll
    for (int c = 0; c < 4; ++c) off[c] = row_in_16 * D * 2 + (((c << 1) ^ x) * 16);
  }
  // Byte address of rows block `i` (16 rows each) and chunk pair `j` (16 columns each).
  __device__ __forceinline__ uint32_t at(uint32_t base, int i, int j) const {
    return base + off[j & 3] + i * 16 * D * 2 + (j >> 2) * 128;
  }
};

// s[n][*] = scores of this warp's rows against keys [8n, 8n + 8) of the tile.
template <int DQK, int BN, typename T>
__device__ __forceinline__ void compute_scores(float (&s)[BN / 8][4],
                                               const uint32_t (&qf)[DQK / 16][4], uint32_t sK,
                                               const LdmatrixOffsets<DQK>& ko) {
#pragma unroll
  for (int n = 0; n < BN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < DQK / 16; ++ks) {
#pragma unroll
    for (int np = 0; np < BN / 16; ++np) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(ko.at(sK, np, ks), b0, b1, b2, b3);
      mma_16816<T>(s[2 * np], qf[ks], b0, b1);
      mma_16816<T>(s[2 * np + 1], qf[ks], b2, b3);
    }
  }
}

// Lane roles for the K reads of compute_scores: matrices 0/1 are keys 0-7 at k halves 0/1,
// matrices 2/3 keys 8-15.
template <int DQK>
__device__ __forceinline__ LdmatrixOffsets<DQK> k_offsets(int lane) {
  const int m = lane >> 3;
  return LdmatrixOffsets<DQK>((lane & 7) + (m >> 1) * 8, m & 1, lane);
}
// Lane roles for the transposed V reads of accumulate_pv: matrices 0/1 are keys 0-7 / 8-15 at
// value columns 0-7, matrices 2/3 the same keys at columns 8-15.
template <int DVO>
__device__ __forceinline__ LdmatrixOffsets<DVO> v_offsets(int lane) {
  const int m = lane >> 3;
  return LdmatrixOffsets<DVO>((lane & 7) + (m & 1) * 8, m >> 1, lane);
}

// o += P V where P (probabilities, this warp's rows x BN keys) is still in the score registers:
// the accumulator layout of S is exactly the A-fragment layout PV needs, after packing to 16 bits.
template <int DVO, int BN, typename T>
__device__ __forceinline__ void accumulate_pv(float (&o)[DVO / 8][4], const float (&p)[BN / 8][4],
                                              uint32_t sV, const LdmatrixOffsets<DVO>& vo) {
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
      ldmatrix_x4_trans(vo.at(sV, kk, dp), b0, b1, b2, b3);
      mma_16816<T>(o[2 * dp], a, b0, b1);
      mma_16816<T>(o[2 * dp + 1], a, b2, b3);
    }
  }
}

}  // namespace sm80
}  // namespace cuda
}  // namespace mlakit
