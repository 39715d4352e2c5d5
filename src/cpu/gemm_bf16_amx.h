// The amx path of gemm_nt_bf16 (gemm_bf16.h), on the AVX-512 path's packed B panels.
#pragma once

#include <cstdint>

namespace mlakit {
namespace cpu {

// Columns per packed panel of B: [k / 2][kGemmPanel] 32-bit words, word (x, j) the bf16 pair
// (B[j][2x], B[j][2x + 1]) of column j. 16 of a panel's columns over 16 pairs are a B tile.
constexpr int kGemmPanel = 64;

// Whether gemm_nt_bf16 takes the tiles: the amx path is in use and k is whole k-steps of 32.
bool gemm_amx_takes(int64_t k);

// C[m, n] = A[m, k] B^T from B's panels (gemm_bf16.cc packs them); k a multiple of 32.
void gemm_panels_amx(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint32_t* panels,
                     uint16_t* c, int64_t ldc);

}  // namespace cpu
}  // namespace mlakit
