// DeepSeek-V3.2 steps (MlaPlanOptions::topk = K > 0): which new tokens attend through the
// indexer's top-K indices. A token at position p sees p + 1 causal keys; while p + 1 <= K the
// indexer selects all of them and dense causal attention is the same result, so only tokens at
// p >= K attend sparsely. A request whose new tokens straddle K is split in two parts, the dense
// one first (its tokens come first in the step's rows), so the rest of the step sees a batch of
// "parts": each part is one request's consecutive new tokens with the context before them.
// Host-only, plain C++; sized once, allocation-free afterwards.
#pragma once

#include <cstdint>
#include <vector>

#include "mlakit/mla.h"

namespace mlakit {
namespace mla {

class SparseSplit {
 public:
  explicit SparseSplit(int max_batch);

  // The parts of `batch` for top-k `topk` (lengths checked): at most two a request. The returned
  // batch points into this object (valid until the next split) and keeps batch's slot_mapping
  // (the parts' tokens are the step's tokens, in order); sparse()[i] says part i attends through
  // its indices. Its block table holds each part's request row (copied: one row per part).
  const MlaBatch& split(const MlaBatch& batch, int topk);
  const uint8_t* sparse() const { return sparse_.data(); }
  int64_t sparse_tokens() const { return sparse_tokens_; }

 private:
  std::vector<int32_t> q_, ctx_, table_;
  std::vector<uint8_t> sparse_;
  int64_t sparse_tokens_ = 0;
  MlaBatch parts_;
};

}  // namespace mla
}  // namespace mlakit
