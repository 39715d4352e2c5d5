// The planner of latent attention: a validated batch -> the plan block of
// contract/latent_layout.h (header, lengths, each request's pages, work items costliest first,
// split merges). Linear in the batch and its pages, allocation-free after
// construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "contract/latent_layout.h"
#include "mlakit/latent.h"
#include "plan/latent_checks.h"

namespace mlakit {
namespace plan {

struct LatentScheduleResult {
  int num_items = 0;
  int num_merges = 0;
  int64_t partial_rows = 0;
  int64_t visible_pairs = 0;
  int split_size = 0;     // keys per split in this plan
  size_t used_bytes = 0;  // the prefix of the block plan() publishes
};

class LatentScheduler {
 public:
  // `layout` from latent::make_layout for this config, block_rows and split_size; `workers` pull
  // the items (0: every plan splits by split_size, as with options.batch_invariant).
  LatentScheduler(const LatentConfig& config, const latent::LatentLayout& layout, int block_rows, int split_size,
                  int workers = 0);

  // A plan's keys per split: split_size, or, unless options.batch_invariant, split_size x 2^k for
  // the largest k <= kMaxWiden that still makes at least kItemsPerWorker x workers items (and
  // fewer than 2^(k-1) does). A
  // batch that fills the workers on its own gains nothing from finer splits and pays for each:
  // a partial row (fp32, written, then read by the merge) and a pipeline start per item.
  static constexpr int kMaxWiden = 5, kItemsPerWorker = 3;

  // Writes the block for a batch that check_latent_plan accepted (`totals` its result).
  LatentScheduleResult build(const LatentBatch& batch, const LatentPlanOptions& options, const LatentTotals& totals,
                             uint8_t* block);

 private:
  LatentConfig config_;
  latent::LatentLayout layout_;
  int block_rows_, split_size_, workers_;
  std::vector<int32_t> order_;             // parts (2r: request r's full splits, 2r + 1: its last), costliest first
  std::vector<int32_t> cost_;              // per part (clamped; -1: none): the sort key
  std::vector<latent::Split> splits_;      // per request: how its keys (dense) or entries split
  std::vector<int64_t> partial_base_;      // per request: its first partial row
  std::vector<int32_t> bucket_;            // counts, then start offsets, per cost
  std::vector<latent::LatentMerge> merges_;  // in generation order
};

}  // namespace plan
}  // namespace mlakit
