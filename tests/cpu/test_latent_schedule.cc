// The latent planner's split choice (plan::LatentScheduler), host code run here with the worker
// count of a GPU: a batch that fills the workers on its own splits long requests less (the
// config's keys per split times a power of two, while at least 3 items per worker remain); a
// batch-invariant plan, a backend without workers (the CPU) and a batch too small to fill them
// split by the config's size; the items still cover every key exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "contract/latent_layout.h"
#include "mlakit/latent.h"
#include "plan/latent_checks.h"
#include "plan/latent_schedule.h"

namespace mlakit {
namespace test {
namespace {

constexpr int kSms = 132;  // an H100's persistent grid

struct Planned {
  plan::LatentScheduleResult r;
  std::vector<latent::LatentItem> items;
};

// Plans `batch` requests of `q` new tokens over `kv` cached ones at `heads`, page 64, with
// `workers` (0: none) and the config's 512 keys per split; the config holds max_batch requests
// (0: batch).
Planned plan_batch(int heads, int batch, int q, int kv, int workers, bool batch_invariant, int topk = 0,
                   int max_batch = 0) {
  LatentConfig c;
  c.num_heads = heads;
  c.block_size = 64;
  c.max_batch = max_batch > 0 ? max_batch : batch;
  c.max_q_tokens = static_cast<int64_t>(c.max_batch) * q;
  c.max_kv_tokens = static_cast<int64_t>(c.max_batch) * kv;
  c.num_blocks = c.max_kv_tokens / 64 + c.max_batch;
  c.max_topk = topk;
  const int cols = (kv + 63) / 64;
  std::vector<int32_t> ql(batch, q), kl(batch, kv), table(static_cast<size_t>(batch) * cols);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  LatentBatch b{batch, ql.data(), kl.data(), table.data(), cols};
  LatentPlanOptions o;
  o.topk = topk;
  o.batch_invariant = batch_invariant;
  const latent::LatentLayout layout =
      latent::make_layout(heads, 64, 64, c.max_batch, c.max_q_tokens, c.max_kv_tokens, c.max_topk, 512);
  std::vector<uint8_t> block(layout.total_bytes);
  plan::LatentScheduler s(c, layout, 64, 512, workers);
  Planned p;
  p.r = s.build(b, o, plan::check_latent_plan(c, b, o), block.data());
  const auto* items = reinterpret_cast<const latent::LatentItem*>(block.data() + layout.arrays_offset);
  p.items.assign(items, items + p.r.num_items);
  return p;
}

// Every key a dense causal plan's row block sees, in exactly one item (requests of q new tokens
// over kv keys, the new ones included, in 64-row blocks of (token, head) rows; a decode's block
// sees every key).
void expect_keys_covered_once(const Planned& p, int heads, int batch, int q, int kv) {
  const int rows = q * heads, blocks = (rows + 63) / 64;
  std::vector<int> seen(static_cast<size_t>(batch) * blocks * kv, 0);
  for (const latent::LatentItem& it : p.items) {
    const int blk = (it.row_begin - it.request * rows) / 64;
    for (int k = it.key_begin; k < it.key_end; ++k) ++seen[(static_cast<size_t>(it.request) * blocks + blk) * kv + k];
  }
  for (int r = 0; r < batch; ++r)
    for (int blk = 0; blk < blocks; ++blk) {
      const int last_tok = (std::min(rows, (blk + 1) * 64) - 1) / heads;  // the block's last row's token
      const int hi = kv - q + last_tok + 1;
      for (int k = 0; k < kv; ++k) ASSERT_EQ(seen[(static_cast<size_t>(r) * blocks + blk) * kv + k], k < hi ? 1 : 0);
    }
}

TEST(LatentSchedule, BatchThatFillsTheGpuSplitsLess) {
  // 128 requests x 4096 keys at 128 heads: 2048 items of 512 keys, 512 of 2048 (>= 3 x 132), 256
  // of 4096 (fewer): 2048 keys a split, a quarter of the partial rows.
  const Planned wide = plan_batch(128, 128, 1, 4096, kSms, false);
  EXPECT_EQ(wide.r.split_size, 2048);
  EXPECT_EQ(wide.r.num_items, 512);
  EXPECT_EQ(wide.r.partial_rows, 128 * 128 * 2);
  expect_keys_covered_once(wide, 128, 128, 1, 4096);
  const Planned fixed = plan_batch(128, 128, 1, 4096, kSms, true);
  EXPECT_EQ(fixed.r.split_size, 512);
  EXPECT_EQ(fixed.r.num_items, 2048);
  EXPECT_EQ(fixed.r.partial_rows, 128 * 128 * 8);
  expect_keys_covered_once(fixed, 128, 128, 1, 4096);
  // 16 heads: 1024 items of 512, 512 of 1024 (>= 396), 256 of 2048.
  EXPECT_EQ(plan_batch(16, 128, 1, 4096, kSms, false).r.split_size, 1024);
}

TEST(LatentSchedule, SmallBatchesWorkerlessBackendsAndLongRowsKeepTheConfigsSplit) {
  EXPECT_EQ(plan_batch(16, 4, 1, 4096, kSms, false).r.split_size, 512);     // 32 items: too few
  EXPECT_EQ(plan_batch(128, 128, 1, 4096, 0, false).r.split_size, 512);     // the CPU: no workers
  const Planned mtp = plan_batch(128, 64, 4, 4096, kSms, false);            // 512 rows: never split
  EXPECT_EQ(mtp.r.num_merges, 0);
  EXPECT_EQ(mtp.r.num_items, 64 * 8);
}

TEST(LatentSchedule, ALoneLargeRequestSplitsItsKeysAcrossTheWorkers) {
  // MTP-4 at 128 heads over 4096 keys: 8 row blocks, 8 items unsplit on 132 workers. Split by 512
  // keys: 64 items, a merge a row block, 512 rows x 8 partial rows.
  const Planned lone = plan_batch(128, 1, 4, 4096, kSms, false, 0, 64);
  EXPECT_EQ(lone.r.num_items, 64);
  EXPECT_EQ(lone.r.num_merges, 8);
  EXPECT_EQ(lone.r.partial_rows, 512 * 8);
  expect_keys_covered_once(lone, 128, 1, 4, 4096);
  // 8 such requests (64 items: half the workers) still split; 16 (128 items) do not.
  const Planned eight = plan_batch(128, 8, 4, 4096, kSms, false, 0, 64);
  EXPECT_EQ(eight.r.num_items, 8 * 64);
  expect_keys_covered_once(eight, 128, 8, 4, 4096);
  EXPECT_EQ(plan_batch(128, 16, 4, 4096, kSms, false, 0, 64).r.num_merges, 0);
  // Batch-invariant plans, the CPU (no workers) and a block too small for the merges keep them whole.
  EXPECT_EQ(plan_batch(128, 1, 4, 4096, kSms, true, 0, 64).r.num_items, 8);
  EXPECT_EQ(plan_batch(128, 1, 4, 4096, 0, false, 0, 64).r.num_items, 8);
  const Planned small_block = plan_batch(128, 1, 4, 4096, kSms, false);  // max_batch 1: 2 merges
  EXPECT_EQ(small_block.r.num_merges, 0);
  expect_keys_covered_once(small_block, 128, 1, 4, 4096);
}

TEST(LatentSchedule, SparseTokensWidenLikeRequests) {
  // 128 decode tokens at 64 heads, top-2048: 512 items of 512 entries, 256 of 1024 (< 396).
  EXPECT_EQ(plan_batch(64, 128, 1, 4096, kSms, false, 2048).r.split_size, 512);
  // 512 tokens: 1024 items of 1024 entries, 512 of 2048 (>= 396), one item a token beyond.
  const Planned p = plan_batch(64, 512, 1, 4096, kSms, false, 2048);
  EXPECT_EQ(p.r.split_size, 2048);
  EXPECT_EQ(p.r.num_merges, 0);
  EXPECT_EQ(p.r.num_items, 512);
}

}  // namespace
}  // namespace test
}  // namespace mlakit
