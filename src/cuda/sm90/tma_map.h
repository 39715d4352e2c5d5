// Host side of TMA: tensor maps for the [rows, heads, cols] tensors the sm90 kernel reads and
// writes, as boxes of 64 columns x `box_rows` rows of one head, swizzled in shared memory as
// wgmma's swizzled descriptors expect: 128-byte rows with the 128-byte swizzle (bf16, fp16),
// 64-byte rows with the 64-byte swizzle (e4m3). cuTensorMapEncodeTiled comes from the driver
// through the runtime's entry-point query, so mlakit does not link libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "mlakit/tensor.h"

namespace mlakit {
namespace cuda {
namespace sm90 {

struct TmaTensor {
  const void* base;
  DType dtype;                       // bf16, fp16 or e4m3
  int64_t cols;                      // innermost extent (a multiple of 64)
  int64_t heads;                     // 0: a rank-2 [rows, cols] tensor (one row shared by all heads)
  int64_t rows;                      // outermost extent (the kernel rewrites it to the plan's total)
  int64_t stride_head, stride_tok;   // in elements
};

// Throws mlakit::Error(kRuntime) naming `what` when the driver refuses the map.
void encode_tma_map(CUtensorMap* map, const TmaTensor& t, int box_rows, const char* what);
// The same without throwing: false when the driver refuses the map (e.g. a stride that is not a
// multiple of 16 bytes), for a caller that has another way to do the copy.
bool try_encode_tma_map(CUtensorMap* map, const TmaTensor& t, int box_rows);

}  // namespace sm90
}  // namespace cuda
}  // namespace mlakit
