// 16-byte pieces of 16-bit rows: what the MLA gather (and its fused cache write) moves. Rows
// are split into pieces of 8 values, consecutive threads take consecutive pieces of a row
// (coalesced), and a grid-stride loop covers rows * pieces.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/load_store16.cuh"
#include "mla/mla_ops.h"

namespace mlakit {
namespace cuda {
namespace mla {

constexpr int kRowCopyThreads = 256;
constexpr int kRowCopyMaxBlocks = 8192;

// Element pointer of row `slot` of the paged cache (16-bit elements).
__device__ __forceinline__ uint16_t* cache_row(const mlakit::mla::CacheView& c, int32_t slot) {
  const int64_t blk = slot / c.block_size, off = slot % c.block_size;
  return static_cast<uint16_t*>(c.data) + blk * c.block_stride + off * c.row_stride;
}

__device__ __forceinline__ void copy16(uint16_t* dst, const uint16_t* src) { store16(dst, load16(src)); }

inline int row_copy_blocks(int64_t pieces) {
  const int64_t b = (pieces + kRowCopyThreads - 1) / kRowCopyThreads;
  return static_cast<int>(b < kRowCopyMaxBlocks ? b : kRowCopyMaxBlocks);
}

}  // namespace mla
}  // namespace cuda
}  // namespace mlakit
