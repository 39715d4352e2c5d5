// Which (query, key) pairs are visible: the one predicate every backend implements (see
// include/mlakit/prefill.h). Rows and columns are positions inside one sequence.
#pragma once

#include <cstdint>

namespace mlakit {
namespace cuda {
namespace sm80 {

struct MaskParams {
  int lq, lk;
  bool causal;
  int window_left;  // -1 = none
  __device__ __forceinline__ bool visible(int row, int col) const {
    const int diag = lk - lq + row;  // bottom-right aligned diagonal
    return col < lk && (!causal || col <= diag) && (window_left < 0 || col >= diag - window_left);
  }
  // True when every pair of rows [row0, row0 + rows) x cols [col0, col0 + cols) is visible, so the
  // tile can skip per-element masking.
  __device__ __forceinline__ bool all_visible(int row0, int rows, int col0, int cols) const {
    const int first_diag = lk - lq + row0;
    const int last_diag = first_diag + rows - 1;
    return col0 + cols <= lk && (!causal || col0 + cols - 1 <= first_diag) &&
           (window_left < 0 || col0 >= last_diag - window_left);
  }
};

// The kv interval [begin, end) a q tile of rows [row0, row0 + rows) can see at all.
struct KvSpan {
  int begin, end;
};
__device__ __forceinline__ KvSpan tile_kv_span(const MaskParams& mp, int row0, int rows) {
  const int first_diag = mp.lk - mp.lq + row0;
  const int last_diag = first_diag + rows - 1;
  int end = mp.causal ? min(mp.lk, last_diag + 1) : mp.lk;
  int begin = mp.window_left >= 0 ? max(0, first_diag - mp.window_left) : 0;
  if (end < begin) end = begin;
  return {begin, max(end, 0)};
}

}  // namespace sm80
}  // namespace cuda
}  // namespace mlakit
