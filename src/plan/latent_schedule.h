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
  int64_t decoded_rows = 0;  // rows a run decodes into the workspace first (0: in the kernel)
  size_t used_bytes = 0;  // the prefix of the block plan() publishes
};

class LatentScheduler {
 public:
  // `layout` from latent::make_layout for this config, block_rows and split_size; `workers` pull
  // the items (0: every plan splits by split_size, as with options.batch_invariant).
  LatentScheduler(const LatentConfig& config, const latent::LatentLayout& layout, int block_rows, int split_size,
                  int workers = 0);

  // A plan's keys per split: split_size, or, unless options.batch_invariant, split_size x 2^k
  // (k <= kMaxWiden) for the k whose plan widened_makespan puts lowest (the finer on a tie).
  // Each item costs a pipeline start and, when its request splits, partial rows written and
  // read back by the merge: about kItemStartTiles key tiles' time. On an H100, decode and MTP
  // at 16 heads ran 11-34% faster with one item per SM than with four (128 x 1 and 64 x 4 new
  // tokens over 4096 keys: splits of 4096 and 2048), while half an item per SM left SMs idle.
  static constexpr int kMaxWiden = 5, kItemStartTiles = 8;

  // LatentFp8Decode::kAuto decodes a plan's rows once when its items read each of them at least
  // this many times on average (every 64-row block of a request reads all its keys; a sparse
  // token's reads its top-k), as each item would decode them again. A decode pass writes and the
  // kernel reads 1,152 bytes a row besides the 656 or 576 the kernel would read. On an H100 at 128
  // heads over 4,096 keys (bench/results/latent-fp8-h100/) a row decoded once cost 0.73-0.74 ns
  // and a row decoded in the kernel 0.24 ns a read, crossing at 3.0 reads: decode (2 reads) ran
  // 1.24x slower decoded once, MTP-2 (4 reads) 1.12x faster and MTP-4 (8 reads) 1.49x faster.
  static constexpr int kDecodeOnceReads = 3;

  // The busiest worker's time, in key tiles, of a plan whose splits hold split_len keys:
  // `items` items over `tiles` key tiles in all (every row block's), `workers` workers taking
  // them costliest first. At least the work spread evenly and at least the longest item (of the
  // request with the most keys, split_keys_max, or a row block of whole_tiles_max tiles that
  // does not split), each with its start.
  static int64_t widened_makespan(int64_t items, int64_t tiles, int64_t split_keys_max, int64_t whole_tiles_max,
                                  int64_t split_len, int workers);

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
