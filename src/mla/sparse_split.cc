#include "mla/sparse_split.h"

#include <algorithm>

namespace mlakit {
namespace mla {

SparseSplit::SparseSplit(int max_batch)
    : q_(2 * static_cast<size_t>(max_batch)), ctx_(q_.size()), sparse_(q_.size()) {}

const MlaBatch& SparseSplit::split(const MlaBatch& b, int topk) {
  const size_t cols = static_cast<size_t>(std::max(b.block_table_cols, 1));
  if (table_.size() < q_.size() * cols) table_.resize(q_.size() * cols);
  int n = 0;
  sparse_tokens_ = 0;
  auto add = [&](int r, int32_t ctx, int32_t q, bool sparse) {
    q_[static_cast<size_t>(n)] = q;
    ctx_[static_cast<size_t>(n)] = ctx;
    sparse_[static_cast<size_t>(n)] = sparse ? 1 : 0;
    if (b.block_table) {
      const int32_t* row = b.block_table + static_cast<int64_t>(r) * b.block_table_cols;
      std::copy(row, row + cols, table_.begin() + static_cast<int64_t>(n) * static_cast<int64_t>(cols));
    }
    if (sparse) sparse_tokens_ += q;
    ++n;
  };
  for (int r = 0; r < b.batch_size; ++r) {
    const int32_t ctx = b.context_lens[r], q = b.query_lens[r];
    // Tokens at positions [ctx, ctx + q); the dense ones are those below topk.
    const int32_t dense = std::min(q, std::max(0, topk - ctx));
    if (dense > 0 || q == 0) add(r, ctx, dense, false);
    if (q - dense > 0) add(r, ctx + dense, q - dense, true);
  }
  parts_ = b;
  parts_.batch_size = n;
  parts_.query_lens = q_.data();
  parts_.context_lens = ctx_.data();
  parts_.block_table = b.block_table ? table_.data() : nullptr;
  parts_.block_table_cols = static_cast<int>(cols);
  return parts_;
}

}  // namespace mla
}  // namespace mlakit
