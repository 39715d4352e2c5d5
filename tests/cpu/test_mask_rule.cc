// The visibility rule's tile-level shortcuts (src/contract/mask_rule.h) against the rule itself:
// a tile is fully visible exactly when every (row, key) pair in it is, and full_tile_starts gives
// exactly the tile starts all_visible accepts, for causal and not, with and without a window, q
// shorter than, equal to and longer than kv.
#include <gtest/gtest.h>

#include <cstdint>

#include "contract/mask_rule.h"

namespace {

using mlakit::rule::KvRange;
using mlakit::rule::MaskRule;

bool every_pair_visible(const MaskRule<int64_t>& mr, int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
  for (int64_t r = row0; r < row0 + rows; ++r)
    for (int64_t c = col0; c < col0 + cols; ++c)
      if (!mr.visible(r, c)) return false;
  return true;
}

TEST(MaskRule, FullTileStartsAreExactlyTheFullyVisibleTiles) {
  int checked = 0, full = 0;
  for (int64_t lq : {1, 5, 16, 40}) {
    for (int64_t lk : {0, 1, 7, 16, 33, 64}) {
      for (bool causal : {false, true}) {
        for (int window : {-1, 0, 3, 20}) {
          const MaskRule<int64_t> mr{lq, lk, causal, window};
          for (int64_t rows : {1, 4, 8}) {
            for (int64_t cols : {1, 4, 8}) {
              for (int64_t row0 = 0; row0 < lq; row0 += rows) {
                const KvRange<int64_t> starts = mr.full_tile_starts(row0, rows, cols);
                for (int64_t col0 = 0; col0 <= lk + cols; ++col0) {
                  const bool want = every_pair_visible(mr, row0, rows, col0, cols);
                  ASSERT_EQ(mr.all_visible(row0, rows, col0, cols), want)
                      << "lq " << lq << " lk " << lk << " causal " << causal << " window " << window << " rows ["
                      << row0 << ", +" << rows << ") keys [" << col0 << ", +" << cols << ")";
                  ASSERT_EQ(starts.lo <= col0 && col0 < starts.hi, want)
                      << "lq " << lq << " lk " << lk << " causal " << causal << " window " << window << " rows ["
                      << row0 << ", +" << rows << ") keys [" << col0 << ", +" << cols << ")";
                  ++checked;
                  full += want;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(full, 0);           // the sweep reaches fully visible tiles
  EXPECT_GT(checked - full, 0);  // and masked ones
}

TEST(MaskRule, FullTileStartsInKernelInts) {
  // The kernels' int instance at a long sequence: q 64 rows before the end of 2^20 keys.
  const MaskRule<int> mr{1 << 16, 1 << 20, true, -1};
  const KvRange<int> s = mr.full_tile_starts((1 << 16) - 64, 64, 128);
  EXPECT_EQ(s.lo, 0);
  // The first row's diagonal is 2^20 - 64: the last full tile's 128 keys end there.
  EXPECT_EQ(s.hi - 1 + 128 - 1, (1 << 20) - 64);
  EXPECT_TRUE(mr.all_visible((1 << 16) - 64, 64, s.hi - 1, 128));
  EXPECT_FALSE(mr.all_visible((1 << 16) - 64, 64, s.hi, 128));
}

}  // namespace
