// Shared-memory tiles are [rows][D] of 16-bit values, stored in 16-byte chunks whose position
// inside each group of 8 chunks is XOR-swizzled by the row. ldmatrix reads 8 consecutive rows at
// the same logical chunk; without the swizzle those 8 addresses are 384 or 256 bytes apart and
// hit the same banks (8-way conflict), with it they land in 8 different bank groups.
#pragma once

#include <cstdint>

namespace mlakit {
namespace cuda {
namespace sm80 {

template <int D>
struct SwizzledRows {
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static_assert(D % 64 == 0, "swizzle needs rows of a multiple of 8 chunks (D % 64 == 0)");
  // Element offset of (row, first element of logical chunk `chunk`).
  __device__ __forceinline__ static int offset(int row, int chunk) {
    return row * D + ((chunk & ~7) | ((chunk ^ row) & 7)) * 8;
  }
};

}  // namespace sm80
}  // namespace cuda
}  // namespace mlakit
