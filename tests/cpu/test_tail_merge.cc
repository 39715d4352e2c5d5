// The tail merge (plan/tail_merge.h): the last short runs of a masked batch interleaved longest
// first. Decoded as the sm90 kernel decodes (find_run_entry, run_local_index, run_item_slot),
// every schedule still holds every (sequence, head, q tile, half) exactly once; the merged tail
// goes longest first with each run's own order kept; the runs before it, and batches the rule
// leaves alone, are exactly the whole-run schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "plan/run_order.h"
#include "plan/scheduler.h"
#include "plan/tail_merge.h"

namespace mlakit {
namespace {

constexpr int kGrid = 132;

std::vector<int32_t> prefix(const std::vector<int32_t>& lens) {
  std::vector<int32_t> p = {0};
  for (int32_t l : lens) p.push_back(p.back() + l);
  return p;
}

struct Decoded {
  int seq, head, q_tile, chunk, entry;
  int32_t cost;  // tile_cost of the q tile
};

struct Built {
  plan::ScheduleResult r;
  std::vector<plan::SeqRun> runs;
  std::vector<Decoded> items;  // in item order
};

Built build(plan::Scheduler& s, const std::vector<int32_t>& q, const std::vector<int32_t>& k, bool causal, int window,
            int heads, int merge_runs) {
  Built b;
  const std::vector<int32_t> qo = prefix(q), kv = prefix(k);
  const int batch = static_cast<int>(q.size());
  b.runs.assign(static_cast<size_t>(plan::max_run_entries(batch)), plan::SeqRun{});
  b.r = s.build_runs(qo.data(), kv.data(), batch, causal, window, heads, b.runs.data(), kGrid, merge_runs);
  for (int w = 0; w < b.r.num_items; ++w) {
    const int e = plan::find_run_entry(b.runs.data(), b.r.num_runs, w);
    const plan::SeqRun& run = b.runs[e];
    const plan::RunItemSlot slot = plan::run_item_slot(plan::run_local_index(run, w), run.num_tiles, run.split_tiles,
                                                         b.r.head_group, run.halves_last != 0, heads);
    const int32_t lq = q[run.seq], lk = k[run.seq], r0 = slot.q_tile * 128;
    b.items.push_back(Decoded{run.seq, slot.head, slot.q_tile, slot.chunk, e,
                              plan::tile_cost(r0, std::min(lq, r0 + 128), lq, lk, causal, window, 128)});
  }
  return b;
}

// Every item exactly once, entries ascending from 0 within their room, and the same items as the
// whole-run schedule (`base`), whose every item is at the same place up to the first merged entry.
void check_against(const Built& m, const Built& base, int batch) {
  ASSERT_LE(m.r.num_runs, plan::max_run_entries(batch));
  EXPECT_EQ(m.r.num_items, base.r.num_items);
  EXPECT_EQ(m.r.head_group, base.r.head_group);
  if (base.r.num_items == 0) {  // no q rows at all
    EXPECT_EQ(m.r.num_runs, 0);
    return;
  }
  ASSERT_GT(m.r.num_runs, 0);
  EXPECT_EQ(m.runs[0].item_begin, 0);
  for (int i = 1; i < m.r.num_runs; ++i) EXPECT_LT(m.runs[i - 1].item_begin, m.runs[i].item_begin) << i;
  std::map<std::tuple<int, int, int, int>, int> seen, want;
  for (const Decoded& d : m.items) ++seen[{d.seq, d.head, d.q_tile, d.chunk}];
  for (const Decoded& d : base.items) ++want[{d.seq, d.head, d.q_tile, d.chunk}];
  EXPECT_EQ(seen, want);
  for (const auto& kv : seen) EXPECT_EQ(kv.second, 1);
  // Up to the first entry that differs, the two schedules are the same entries.
  int same = 0;
  while (same < m.r.num_runs && same < base.r.num_runs && m.runs[same].seq == base.runs[same].seq &&
         m.runs[same].item_begin == base.runs[same].item_begin && m.runs[same].local_begin == 0)
    ++same;
  const int first_merged_item = same < m.r.num_runs ? m.runs[same].item_begin : m.r.num_items;
  for (int w = 0; w < first_merged_item; ++w) {
    EXPECT_EQ(m.items[w].seq, base.items[w].seq);
    EXPECT_EQ(m.items[w].head, base.items[w].head);
    EXPECT_EQ(m.items[w].q_tile, base.items[w].q_tile);
  }
  // The merged tail: longest first; a run's items of equal cost keep their own order (the
  // whole-run order's positions increase; with several head groups or a window a run's own order
  // is not longest first, so only ties keep it).
  std::map<std::tuple<int, int, int, int>, int> pos;
  for (int w = 0; w < base.r.num_items; ++w) {
    const Decoded& d = base.items[w];
    pos[{d.seq, d.head, d.q_tile, d.chunk}] = w;
  }
  std::map<std::pair<int, int32_t>, int> last_pos;  // (seq, cost) -> position in the whole-run order
  for (int w = first_merged_item; w < m.r.num_items; ++w) {
    const Decoded& d = m.items[w];
    if (w > first_merged_item) EXPECT_LE(d.cost, m.items[w - 1].cost) << "item " << w;
    const int p = pos[{d.seq, d.head, d.q_tile, d.chunk}];
    const auto key = std::make_pair(d.seq, d.cost);
    if (last_pos.count(key)) EXPECT_GT(p, last_pos[key]) << "seq " << d.seq;
    last_pos[key] = p;
  }
}

// The seed's N=100 step 1 at budget 8192 (a cut prompt with 200 tokens of context, seven
// 999-token prompts, a 400-token cut): its last three runs merge, and the launch ends on 1-tile
// items instead of the 400-token prompt's 4-tile ones.
TEST(TailMerge, SeedStepEndsOnTheShortestItems) {
  const std::vector<int32_t> q = {799, 999, 999, 999, 999, 999, 999, 999, 400};
  const std::vector<int32_t> k = {999, 999, 999, 999, 999, 999, 999, 999, 400};
  plan::Scheduler s(16, 20000, 20000, 128, 128);
  const Built base = build(s, q, k, true, -1, 16, 0);
  const Built m = build(s, q, k, true, -1, 16, plan::kTailMergeRuns);
  check_against(m, base, 9);
  EXPECT_GT(m.r.num_runs, base.r.num_runs);
  // Whole runs end on the 400-token prompt: its 16 one-tile items after its 4-tile ones; merged,
  // the last 48 items are the one-tile items of the three merged runs.
  EXPECT_EQ(base.items.back().seq, 8);
  int tail_ones = 0;
  for (int w = m.r.num_items - 1; w >= 0 && m.items[w].cost == 2; --w) ++tail_ones;
  EXPECT_EQ(tail_ones, 48);
  int merged_runs = 0;
  for (int seq = 0; seq < 9; ++seq) {
    int entries = 0;
    for (int i = 0; i < m.r.num_runs; ++i) entries += m.runs[i].seq == seq;
    merged_runs += entries > 1;
  }
  EXPECT_EQ(merged_runs, 3);
}

TEST(TailMerge, RandomBatchesDecodeToTheSameItems) {
  std::mt19937 rng(5);
  plan::Scheduler s(24, 60000, 120000, 128, 128);
  int merged = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int batch = 1 + rng() % 24;
    std::vector<int32_t> q, k;
    for (int b = 0; b < batch; ++b) {
      q.push_back(rng() % 6 == 0 ? 0 : 1 + rng() % (rng() % 4 == 0 ? 2500 : 1000));
      k.push_back(q.back() + (rng() % 3 == 0 ? rng() % 2000 : 0));
    }
    const int heads = std::vector<int>{1, 2, 3, 8, 16, 20, 128}[rng() % 7];
    const bool causal = rng() % 4 != 0;
    const int window = rng() % 5 == 0 ? static_cast<int>(rng() % 700) : -1;
    const Built base = build(s, q, k, causal, window, heads, 0);
    const Built m = build(s, q, k, causal, window, heads, plan::kTailMergeRuns);
    check_against(m, base, batch);
    merged += m.r.num_runs != base.r.num_runs;
    if (!causal && window < 0) EXPECT_EQ(m.r.num_runs, base.r.num_runs) << "equal items: nothing to reorder";
  }
  EXPECT_GT(merged, 100);
}

TEST(TailMerge, WhatTheRuleLeavesAlone) {
  plan::Scheduler s(8, 40000, 40000, 128, 128);
  auto entries = [&](const std::vector<int32_t>& q, const std::vector<int32_t>& k, bool causal, int heads) {
    return build(s, q, k, causal, -1, heads, plan::kTailMergeRuns).r.num_runs;
  };
  EXPECT_EQ(entries({999}, {999}, true, 16), 1);                       // one run
  EXPECT_EQ(entries({999, 999, 400}, {999, 999, 400}, false, 16), 3);  // no mask: equal items
  // DeepSeek-V3's 128 heads: 999-token prompts hold 8 x 128 x 999 keys x heads, past the K/V budget.
  EXPECT_EQ(entries({999, 999, 400}, {999, 999, 400}, true, 128), 3);
  // Long prompts: past the segment budget (48) and the K/V budget.
  EXPECT_EQ(entries({9000, 9000, 9000}, {9000, 9000, 9000}, true, 16), 3);
  // Two short runs merge; a third past the K/V budget stays whole before them.
  const Built b = build(s, {3000, 300, 200}, {3000, 300, 200}, true, -1, 16, plan::kTailMergeRuns);
  EXPECT_EQ(b.runs[0].seq, 0);
  EXPECT_EQ(b.runs[0].local_begin, 0);
  EXPECT_EQ(b.runs[1].item_begin, 24 * 16);
  EXPECT_GT(b.r.num_runs, 3);
  // A run that splits its key range (the small-sequence rule) ends the window.
  const int64_t bound = plan::kv_split_slot_bound(8, 40000, 16, 128, kGrid);
  plan::Scheduler split(8, 40000, 40000, 128, 128, plan::KvSplitSettings{kGrid, bound});
  const Built sp = build(split, {999, 600}, {999, 600}, true, -1, 16, plan::kTailMergeRuns);
  EXPECT_GT(sp.runs[sp.r.num_runs - 1].split_tiles + sp.runs[0].split_tiles, 0);
  EXPECT_EQ(sp.r.num_runs, 2);
}

}  // namespace
}  // namespace mlakit
