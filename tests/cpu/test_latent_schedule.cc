// The latent planner (plan::LatentScheduler), host code run here with the worker count of a GPU:
// its split choice (a batch that fills the workers on its own splits long requests less: the
// config's keys per split times the power of two its cost model puts fastest; a batch-invariant
// plan, a backend without workers (the CPU) and a batch too small to fill them split by the
// config's size), its item order (costliest first, taken by the workers about as a greedy
// longest-first assignment would place them), and what must hold whatever it chooses: every key
// in exactly one item, every partial row in one merge and written by one item.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <queue>
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
  std::vector<latent::LatentMerge> merges;
};

// Plans `batch` requests of `q` new tokens over `kv` cached ones at `heads`, page 64, with
// `workers` (0: none) and the config's 512 keys per split; the config holds max_batch requests
// (0: batch).
Planned plan_batch(int heads, int batch, int q, int kv, int workers, bool batch_invariant, int topk = 0,
                   int max_batch = 0, const std::vector<int32_t>& kv_lens = {}) {
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
  if (!kv_lens.empty()) kl = kv_lens;  // each at most kv
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
  const auto* merges = reinterpret_cast<const latent::LatentMerge*>(items + p.r.num_items);
  p.merges.assign(merges, merges + p.r.num_merges);
  return p;
}

// Every key a dense causal plan's row block sees, in exactly one item (requests of q new tokens
// over kv keys (kv_lens[r] when given), the new ones included, in 64-row blocks of (token, head)
// rows; a decode's block sees every key).
void expect_keys_covered_once(const Planned& p, int heads, int batch, int q, int kv,
                              const std::vector<int32_t>& kv_lens = {}) {
  const int rows = q * heads, blocks = (rows + 63) / 64;
  std::vector<int> seen(static_cast<size_t>(batch) * blocks * kv, 0);
  for (const latent::LatentItem& it : p.items) {
    // The CUDA kernel's tiles start at multiples of 64: one lies in one cache block of 64+ rows.
    ASSERT_EQ(it.key_begin % 64, 0) << "item of request " << it.request;
    const int blk = (it.row_begin - it.request * rows) / 64;
    for (int k = it.key_begin; k < it.key_end; ++k) ++seen[(static_cast<size_t>(it.request) * blocks + blk) * kv + k];
  }
  for (int r = 0; r < batch; ++r)
    for (int blk = 0; blk < blocks; ++blk) {
      const int kvr = kv_lens.empty() ? kv : kv_lens[r];
      const int last_tok = (std::min(rows, (blk + 1) * 64) - 1) / heads;  // the block's last row's token
      const int hi = kvr - q + last_tok + 1;
      for (int k = 0; k < kv; ++k) ASSERT_EQ(seen[(static_cast<size_t>(r) * blocks + blk) * kv + k], k < hi ? 1 : 0);
    }
}

// Every partial row a plan writes belongs to one split of one merge, and each split's rows to
// the item of that split: the regions of the merges are disjoint and within partial_rows.
void expect_partials_disjoint(const Planned& p) {
  std::vector<int> owner(static_cast<size_t>(p.r.partial_rows), 0);
  for (const latent::LatentMerge& m : p.merges)
    for (int64_t i = m.partial; i < m.partial + static_cast<int64_t>(m.splits) * m.rows; ++i) {
      ASSERT_LT(i, p.r.partial_rows);
      ASSERT_EQ(owner[static_cast<size_t>(i)]++, 0) << "partial row " << i << " in two merges";
    }
  std::vector<int> written(owner.size(), 0);
  for (const latent::LatentItem& it : p.items) {
    if (it.partial < 0) continue;
    for (int64_t i = it.partial; i < it.partial + it.rows; ++i) ++written[static_cast<size_t>(i)];
  }
  EXPECT_EQ(written, owner);  // every merged row written by exactly one item
}

// An item's cost in the planner's model: its key tiles plus its start.
int64_t item_cost(const latent::LatentItem& it) {
  return (it.key_end - it.key_begin + 63) / 64 + plan::LatentScheduler::kItemStartTiles;
}

// The busiest of `workers` persistent workers taking the items by latent::worker_item.
int64_t worker_item_makespan(const Planned& p, int workers) {
  int64_t most = 0;
  for (int w = 0; w < workers; ++w) {
    int64_t load = 0;
    for (int64_t round = 0, i = w; i < static_cast<int64_t>(p.items.size()); i = latent::worker_item(++round, w, workers))
      load += item_cost(p.items[static_cast<size_t>(i)]);
    most = std::max(most, load);
  }
  return most;
}

// The busiest worker when each item, costliest first, goes to the least loaded worker (greedy
// longest-first: within 4/3 of the best assignment).
int64_t greedy_makespan(const Planned& p, int workers) {
  std::vector<int64_t> costs;
  for (const latent::LatentItem& it : p.items) costs.push_back(item_cost(it));
  std::sort(costs.rbegin(), costs.rend());
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> loads;
  for (int w = 0; w < workers; ++w) loads.push(0);
  for (const int64_t c : costs) {
    const int64_t l = loads.top();
    loads.pop();
    loads.push(l + c);
  }
  int64_t most = 0;
  for (; !loads.empty(); loads.pop()) most = loads.top();
  return most;
}

TEST(LatentSchedule, BatchThatFillsTheGpuSplitsLess) {
  // 128 requests x 4096 keys at 128 heads (two row blocks each): 2048 items of 512 keys, ..., 256
  // of 4096, about two an SM: the busiest SM's 2 x (64 tiles + a start) is below 4 x (32 + a
  // start). Whole requests: no partial rows, no merges.
  const Planned wide = plan_batch(128, 128, 1, 4096, kSms, false);
  EXPECT_EQ(wide.r.split_size, 4096);
  EXPECT_EQ(wide.r.num_items, 256);
  EXPECT_EQ(wide.r.partial_rows, 0);
  EXPECT_EQ(wide.r.num_merges, 0);
  expect_keys_covered_once(wide, 128, 128, 1, 4096);
  const Planned fixed = plan_batch(128, 128, 1, 4096, kSms, true);
  EXPECT_EQ(fixed.r.split_size, 512);
  EXPECT_EQ(fixed.r.num_items, 2048);
  EXPECT_EQ(fixed.r.partial_rows, 128 * 128 * 8);
  expect_keys_covered_once(fixed, 128, 128, 1, 4096);
  // Over 2048 keys (the Python GPU test's batch): whole requests as well.
  EXPECT_EQ(plan_batch(128, 128, 1, 2048, kSms, false).r.split_size, 2048);
  // 16 heads: one row block a request, 128 items of 4096 (one an SM, 4 SMs idle) beat 256 of 2048.
  EXPECT_EQ(plan_batch(16, 128, 1, 4096, kSms, false).r.split_size, 4096);
  // 64 MTP-4 requests at 16 heads (64 rows each): 128 items of 2048 keys; 64 of 4096 would leave
  // half the SMs idle.
  EXPECT_EQ(plan_batch(16, 64, 4, 4096, kSms, false).r.split_size, 2048);
  // 16 decodes over 65536 keys (at most 32 splits a request: 2048 keys at least): 8192 keys, 128
  // items, one an SM; 4096 would make two an SM, 16384 leave half the SMs idle.
  EXPECT_EQ(plan_batch(16, 16, 1, 65536, kSms, false).r.split_size, 8192);
}

TEST(LatentSchedule, SmallBatchesWorkerlessBackendsAndLongRowsKeepTheConfigsSplit) {
  EXPECT_EQ(plan_batch(16, 4, 1, 4096, kSms, false).r.split_size, 512);     // 32 items: the longest bounds
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

TEST(LatentSchedule, WorkersTakeEveryItemOnceInIncreasingOrder) {
  for (const int workers : {1, 2, 7, 132})
    for (const int n : {0, 1, 131, 132, 133, 264, 265, 1000}) {
      std::vector<int> taken(static_cast<size_t>(n), 0);
      for (int w = 0; w < workers; ++w) {
        int64_t prev = -1;
        for (int64_t round = 0, i = w; i < n; i = latent::worker_item(++round, w, workers)) {
          ASSERT_GT(i, prev);
          prev = i;
          ++taken[static_cast<size_t>(i)];
        }
      }
      for (int i = 0; i < n; ++i) ASSERT_EQ(taken[static_cast<size_t>(i)], 1) << "item " << i << " of " << n;
    }
}

TEST(LatentSchedule, RaggedBatchesReachTheWorkersBalanced) {
  // 128 decodes over 512-8192 keys: the split widens to 4096 keys at 16 heads (requests end in
  // last splits of 1 to 64 tiles) and to whole requests at 128 (two row blocks each); with
  // batch_invariant, 512-key splits. Listed costliest first and taken by worker_item, the
  // busiest worker has at most 3% more than with a greedy longest-first assignment.
  std::vector<int32_t> lens(128);
  uint32_t x = 12345;
  for (int32_t& l : lens) {
    x = x * 1664525u + 1013904223u;
    l = 512 + static_cast<int32_t>((x >> 8) % (8192 - 512 + 1));
  }
  for (const int heads : {16, 128, -128}) {  // -128: 128 heads, batch_invariant
    const Planned p = plan_batch(std::abs(heads), 128, 1, 8192, kSms, heads < 0, 0, 0, lens);
    EXPECT_EQ(p.r.split_size, heads == 16 ? 4096 : heads > 0 ? 8192 : 512);
    for (size_t i = 1; i < p.items.size(); ++i)  // costliest first: a decode's items differ by keys only
      ASSERT_LE((p.items[i].key_end - p.items[i].key_begin + 63) / 64,
                (p.items[i - 1].key_end - p.items[i - 1].key_begin + 63) / 64) << "item " << i;
    EXPECT_LE(worker_item_makespan(p, kSms), greedy_makespan(p, kSms) * 103 / 100) << heads << " heads";
    expect_keys_covered_once(p, std::abs(heads), 128, 1, 8192, lens);
    expect_partials_disjoint(p);
  }
  // Causal MTP and a lone request split across the workers: keys and partial rows stay exact.
  const std::vector<int32_t> mtp_lens = {4096, 700, 2, 3000, 129, 4000, 64, 1000};
  const Planned mtp = plan_batch(16, 8, 4, 4096, kSms, false, 0, 0, mtp_lens);
  expect_keys_covered_once(mtp, 16, 8, 4, 4096, mtp_lens);
  expect_partials_disjoint(mtp);
  const Planned lone = plan_batch(128, 1, 4, 4096, kSms, false, 0, 64);
  expect_partials_disjoint(lone);
}

TEST(LatentSchedule, SparseTokensWidenLikeRequests) {
  // 128 decode tokens at 64 heads, top-2048: 512 items of 512 entries, ..., 128 of 2048 (one an
  // SM: one item a token).
  EXPECT_EQ(plan_batch(64, 128, 1, 4096, kSms, false, 2048).r.split_size, 2048);
  // 512 tokens: 512 items of 2048 entries, one a token.
  const Planned p = plan_batch(64, 512, 1, 4096, kSms, false, 2048);
  EXPECT_EQ(p.r.split_size, 2048);
  EXPECT_EQ(p.r.num_merges, 0);
  EXPECT_EQ(p.r.num_items, 512);
  // 128 tokens split by 512 entries (batch_invariant): every split's partial rows its own.
  const Planned fixed = plan_batch(64, 128, 1, 4096, kSms, true, 2048);
  EXPECT_EQ(fixed.r.num_merges, 128);
  expect_partials_disjoint(fixed);
}

// At 128 heads (twice an item's 64 rows) items come in pairs, 2i and 2i + 1: one token's (or
// row block's tokens') two head blocks over the same keys, which the CUDA kernel on FP8 caches
// runs on two CTAs that share each key tile's decode.
void expect_paired(const Planned& p, int heads) {
  ASSERT_TRUE(latent::paired_items(heads, 64));
  ASSERT_EQ(p.items.size() % 2, 0u);
  for (size_t i = 0; i < p.items.size(); i += 2) {
    const latent::LatentItem &a = p.items[i], &b = p.items[i + 1];
    EXPECT_EQ(a.request, b.request) << "pair " << i / 2;
    EXPECT_EQ(a.token, b.token) << "pair " << i / 2;
    EXPECT_EQ(a.key_begin, b.key_begin) << "pair " << i / 2;
    EXPECT_EQ(a.key_end, b.key_end) << "pair " << i / 2;
    EXPECT_EQ(a.split, b.split) << "pair " << i / 2;
    EXPECT_EQ(a.rows, 64);
    EXPECT_EQ(b.rows, 64);
    EXPECT_EQ(b.row_begin, a.row_begin + 64) << "pair " << i / 2;
    EXPECT_EQ(a.row_begin % heads, 0) << "pair " << i / 2;  // a token's first head
  }
}

TEST(LatentSchedule, AtTwiceTheItemRowsATokensHeadBlocksAreAdjacentItems) {
  EXPECT_FALSE(latent::paired_items(64, 64));
  EXPECT_FALSE(latent::paired_items(16, 64));
  // Decode split or whole, causal MTP and extends (several tokens an item pair), ragged lengths,
  // sparse tokens split or whole.
  expect_paired(plan_batch(128, 128, 1, 4096, kSms, false), 128);
  expect_paired(plan_batch(128, 128, 1, 4096, kSms, true), 128);
  expect_paired(plan_batch(128, 1, 1, 8192, kSms, false), 128);
  expect_paired(plan_batch(128, 64, 2, 4096, kSms, false), 128);
  expect_paired(plan_batch(128, 16, 4, 3000, kSms, true), 128);
  expect_paired(plan_batch(128, 1, 64, 4096, kSms, false), 128);  // a lone extend: its keys split too
  expect_paired(plan_batch(128, 8, 1, 4096, kSms, false, 0, 0, {4096, 1, 0, 777, 64, 65, 2049, 3}), 128);
  expect_paired(plan_batch(128, 128, 2, 4096, kSms, false, 2048), 128);
  expect_paired(plan_batch(128, 128, 2, 4096, kSms, true, 2048), 128);
  expect_paired(plan_batch(128, 3, 5, 4096, 0, false, 1000), 128);
  const Planned lone = plan_batch(128, 1, 64, 4096, kSms, false);
  expect_keys_covered_once(lone, 128, 1, 64, 4096);
  expect_partials_disjoint(lone);
}

}  // namespace
}  // namespace test
}  // namespace mlakit
