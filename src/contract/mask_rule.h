// Which (query, key) pairs are visible: the one rule the planner, the CPU backend's fast path and
// every CUDA kernel implement, written once for host and device (the float64 reference in
// src/cpu/reference.cc keeps its own independent copy, so a mistake here cannot hide from it).
//
// For query row i (0-based inside its sequence) of a sequence with lengths (lq, lk):
//   causal:            keys j <= lk - lq + i       (aligned bottom-right, as FA2 / FlashInfer)
//   window_left w>=0:  keys j >= lk - lq + i - w
// and always 0 <= j < lk. `I` is int64_t on the host and int inside kernels.
#pragma once

#include <cstdint>

#include "contract/host_device.h"

namespace mlakit {
namespace rule {

template <typename I>
MLAKIT_HD I imin(I a, I b) { return a < b ? a : b; }
template <typename I>
MLAKIT_HD I imax(I a, I b) { return a > b ? a : b; }

// Keys [lo, hi); hi <= lo means none.
template <typename I>
struct KvRange {
  I lo;
  I hi;
  MLAKIT_HD bool empty() const { return hi <= lo; }
};

template <typename I>
struct MaskRule {
  I lq, lk;
  bool causal;
  int window_left;  // -1 = none

  // Diagonal of row `row`: the last key causal attention lets it see.
  MLAKIT_HD I diag(I row) const { return lk - lq + row; }

  MLAKIT_HD KvRange<I> row_range(I row) const {
    const I d = diag(row);
    const I hi = causal ? imin<I>(lk, d + 1) : lk;
    const I lo = window_left >= 0 ? imax<I>(0, d - window_left) : 0;
    return {lo, hi};
  }

  MLAKIT_HD bool visible(I row, I col) const {
    const I d = diag(row);
    return col < lk && (!causal || col <= d) && (window_left < 0 || col >= d - window_left);
  }

  // True when every pair of rows [row0, row0 + rows) x keys [col0, col0 + cols) is visible, so a
  // tile can skip per-element masking. Both bounds of row_range grow with the row, so the first
  // row decides the upper bound and the last row the lower one.
  MLAKIT_HD bool all_visible(I row0, I rows, I col0, I cols) const {
    const I first_diag = diag(row0);
    const I last_diag = first_diag + rows - 1;
    return col0 + cols <= lk && (!causal || col0 + cols - 1 <= first_diag) &&
           (window_left < 0 || col0 >= last_diag - window_left);
  }

  // The key-tile starts col0 >= 0 at which all_visible(row0, rows, col0, cols) holds, as [lo, hi):
  // each of its three conditions bounds col0 on one side. A kernel walking a q tile's key tiles takes
  // them once per tile of rows and then compares each start, instead of evaluating the rule per
  // key tile.
  MLAKIT_HD KvRange<I> full_tile_starts(I row0, I rows, I cols) const {
    const I first_diag = diag(row0);
    const I last_diag = first_diag + rows - 1;
    const I hi = causal ? imin<I>(lk - cols, first_diag - cols + 1) : lk - cols;
    const I lo = window_left >= 0 ? last_diag - window_left : 0;
    return {lo, hi + 1};
  }

  // The union of the visible ranges of rows [row0, row0 + rows): what a q tile must walk.
  // empty() when no row of the tile sees any key.
  MLAKIT_HD KvRange<I> tile_range(I row0, I rows) const {
    const KvRange<I> first = row_range(row0);
    const KvRange<I> last = row_range(row0 + rows - 1);
    return {first.lo, last.hi};
  }
};

}  // namespace rule
}  // namespace mlakit
