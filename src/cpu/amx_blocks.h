// Blocks of up to 2 x 2 accumulator tiles, the amx path's unit of work (attention_amx.cc, both
// products; gemm_bf16_amx.cc): C(i, j) is tile 2i + j (tmm0..3), A_i tile 4 + i, B_j tile 6 + j,
// with RA A tiles (1, 2) and CB B tiles (1, 2). Four independent accumulators keep TDPBF16PS's
// pipeline full (one instruction per 16 cycles, each waiting on the previous one into its C),
// and each A and B tile loaded serves two products.
//
// B and C tiles are read from and written to buffers of kWideRow bytes per row: 64 fp32 (S^T,
// O^T, the GEMM's C) or 64 bf16 pairs (the packed Q, P^T, the GEMM's packed B panels), so B_1 and
// C(i, 1) are the 16 columns after B_0 and C(i, 0): 64 bytes further.
#pragma once

#include <cstdint>

#include "cpu/amx_tiles.h"

namespace mlakit {
namespace cpu {
namespace amx {

constexpr int64_t kWideRow = 256;

template <int RA, int CB>
MLAKIT_TILE_OP void c_zero() {
  tile_zero<0>();
  if (CB > 1) tile_zero<1>();
  if (RA > 1) tile_zero<2>();
  if (RA > 1 && CB > 1) tile_zero<3>();
}

// C(i, j) at c + i * c_row + 64 j.
template <int RA, int CB>
MLAKIT_TILE_OP void c_load(const char* c, int64_t c_row) {
  tile_load<0>(c, kWideRow);
  if (CB > 1) tile_load<1>(c + 64, kWideRow);
  if (RA > 1) tile_load<2>(c + c_row, kWideRow);
  if (RA > 1 && CB > 1) tile_load<3>(c + c_row + 64, kWideRow);
}

template <int RA, int CB>
MLAKIT_TILE_OP void c_store(char* c, int64_t c_row) {
  tile_store<0>(c, kWideRow);
  if (CB > 1) tile_store<1>(c + 64, kWideRow);
  if (RA > 1) tile_store<2>(c + c_row, kWideRow);
  if (RA > 1 && CB > 1) tile_store<3>(c + c_row + 64, kWideRow);
}

// One k-step: A_0 at a0, A_1 at a1 (rows a_stride bytes apart), B_0 at b, B_1 at b + 64;
// C(i, j) += A_i B_j.
template <int RA, int CB>
MLAKIT_TILE_OP void k_step(const char* a0, const char* a1, int64_t a_stride, const char* b) {
  tile_load<4>(a0, a_stride);
  tile_load<6>(b, kWideRow);
  if (CB > 1) tile_load<7>(b + 64, kWideRow);
  tile_dp<0, 4, 6>();
  if (CB > 1) tile_dp<1, 4, 7>();
  if (RA > 1) {
    tile_load<5>(a1, a_stride);
    tile_dp<2, 5, 6>();
    if (CB > 1) tile_dp<3, 5, 7>();
  }
}

}  // namespace amx
}  // namespace cpu
}  // namespace mlakit
