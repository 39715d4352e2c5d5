// The key-range split rule (plan/kv_split.h), the runs it produces and their decoding
// (plan/run_order.h run_item_slot), and how a kernel choice sizes its slots (size_kv_split).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "plan/kernel_select.h"
#include "plan/kv_split.h"
#include "plan/run_order.h"
#include "plan/scheduler.h"

namespace mlakit {
namespace {

using plan::KvSplit;
using plan::KvSplitSettings;
using plan::kv_split_for;

constexpr int kSms = 132;
const KvSplitSettings kOnH200{kSms, 1 << 30};

// kv tiles q tile t of (lq, lk) walks, from key 0 (no window), by brute force over its rows.
int64_t brute_kv_tiles(int64_t t, int64_t lq, int64_t lk, bool causal) {
  int64_t hi = 0;
  for (int64_t i = t * 128; i < std::min(lq, (t + 1) * 128); ++i) {
    hi = std::max(hi, causal ? std::min(lk, lk - lq + i + 1) : lk);
  }
  return (hi + 127) / 128;
}

TEST(KvSplitRule, OneShortPromptSplitsItsLongTilesInHalves) {
  // 999 tokens, 16 heads: 8 q tiles x 16 = 128 items < 132; tiles walk 1..8 kv tiles; c = 4, so
  // tiles 4..7 (5..8 kv tiles) split.
  const KvSplit k = kv_split_for(999, 999, true, -1, 16, 128, 128, kOnH200);
  EXPECT_EQ(k.chunk_tiles, 4);
  EXPECT_EQ(k.split_tiles, 4);
  // Its own lengths decide: the same with any other settings capacity.
  const KvSplit k2 = kv_split_for(999, 999, true, -1, 16, 128, 128, KvSplitSettings{kSms, 5});
  EXPECT_EQ(k2.chunk_tiles, 4);
  EXPECT_EQ(k2.split_tiles, 4);
}

TEST(KvSplitRule, NoSplitWhenItFillsTheGridHasAWindowIsShortOrIsOff) {
  EXPECT_EQ(kv_split_for(999, 999, true, -1, 17, 128, 128, kOnH200).chunk_tiles, 0);   // 136 items
  EXPECT_EQ(kv_split_for(999, 999, true, 256, 16, 128, 128, kOnH200).chunk_tiles, 0);  // window
  EXPECT_EQ(kv_split_for(200, 384, true, -1, 16, 128, 128, kOnH200).chunk_tiles, 0);   // 3 kv tiles
  EXPECT_EQ(kv_split_for(999, 999, true, -1, 16, 128, 128, KvSplitSettings{}).chunk_tiles, 0);
  EXPECT_EQ(kv_split_for(0, 999, true, -1, 16, 128, 128, kOnH200).chunk_tiles, 0);
  EXPECT_EQ(kv_split_for(999, 0, true, -1, 16, 128, 128, kOnH200).chunk_tiles, 0);
}

TEST(KvSplitRule, NonCausalSplitsEveryTileAndDecodeLikeQueriesSplitToo) {
  // 1024 queries against 4096 keys, non-causal: every tile walks 32 kv tiles.
  const KvSplit k = kv_split_for(1024, 4096, false, -1, 16, 128, 128, kOnH200);
  EXPECT_EQ(k.chunk_tiles, 16);
  EXPECT_EQ(k.split_tiles, 8);
  // One query row against 1000 keys (a short chunk over a long context), 128 heads.
  const KvSplit d = kv_split_for(1, 1000, true, -1, 128, 128, 128, kOnH200);
  EXPECT_EQ(d.chunk_tiles, 4);
  EXPECT_EQ(d.split_tiles, 1);
}

TEST(KvSplitRule, HalvesAreNonEmptyAndTheSplitTilesAreTheLastOnes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t lq = 1 + rng() % 1200;
    const int64_t lk = (rng() % 2 ? lq : 0) + rng() % 2000;
    const bool causal = rng() % 2;
    const int heads = 1 + rng() % 40;
    const KvSplit k = kv_split_for(lq, lk, causal, -1, heads, 128, 128, kOnH200);
    const int64_t tiles = (lq + 127) / 128;
    if (k.chunk_tiles == 0) {
      EXPECT_EQ(k.split_tiles, 0);
      continue;
    }
    EXPECT_LT(tiles * heads, kSms);
    EXPECT_GE(k.chunk_tiles, plan::kMinChunkTiles);
    EXPECT_GE(k.split_tiles, 1);
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t n = brute_kv_tiles(t, lq, lk, causal);
      const bool splits = t >= tiles - k.split_tiles;
      EXPECT_EQ(splits, n > k.chunk_tiles) << lq << " " << lk << " tile " << t;
      if (splits) EXPECT_LE(n - k.chunk_tiles, k.chunk_tiles);  // the second half is the shorter
    }
  }
}

// Decodes every item of a run and checks: each (head, q tile) once if it does not split, each
// half once if it does; the halves of one (q tile, head) share a slot no other pair uses.
void check_run_decoding(int tiles, int split, int heads, bool halves_last = false) {
  const int g = halves_last ? 1 : plan::run_head_group(heads);
  std::map<std::tuple<int, int, int>, int> seen;
  std::map<int, std::pair<int, int>> slot_owner;
  const int items = (tiles + split) * heads;
  for (int local = 0; local < items; ++local) {
    const plan::RunItemSlot s = plan::run_item_slot(local, tiles, split, g, halves_last, heads);
    ASSERT_GE(s.head, 0);
    ASSERT_LT(s.head, heads);
    ASSERT_GE(s.q_tile, 0);
    ASSERT_LT(s.q_tile, tiles);
    const bool splits = s.q_tile >= tiles - split;
    if (splits) {
      ASSERT_TRUE(s.chunk == 0 || s.chunk == 1);
      ASSERT_GE(s.slot, 0);
      ASSERT_LT(s.slot, split * heads);
      const auto owner = std::make_pair(s.head, s.q_tile);
      auto it = slot_owner.find(s.slot);
      if (it == slot_owner.end()) slot_owner[s.slot] = owner;
      else EXPECT_EQ(it->second, owner) << "slot " << s.slot << " shared by two tiles";
    } else {
      EXPECT_EQ(s.chunk, -1);
      EXPECT_EQ(s.slot, -1);
    }
    ++seen[{s.head, s.q_tile, s.chunk}];
  }
  EXPECT_EQ(static_cast<int>(seen.size()), items);
  for (const auto& e : seen) EXPECT_EQ(e.second, 1);
  EXPECT_EQ(static_cast<int>(slot_owner.size()), split * heads);
}

TEST(KvSplitRuns, EveryItemAndHalfOnceWithOneSlotPerSplitTile) {
  for (int heads : {1, 3, 16, 128}) {
    for (int tiles : {1, 2, 8}) {
      for (int split = 0; split <= tiles; ++split) {
        check_run_decoding(tiles, split, heads);
        if (split == 1) check_run_decoding(tiles, split, heads, true);  // the tail rule's shape
      }
    }
  }
}

TEST(KvSplitRuns, HalvesLastPutEveryWholeItemFirstAndPairTheHalves) {
  const int tiles = 40, heads = 16;
  int local = 0;
  for (; local < (tiles - 1) * heads; ++local) {
    EXPECT_EQ(plan::run_item_slot(local, tiles, 1, 1, true, heads).chunk, -1) << local;
  }
  for (int h = 0; h < heads; ++h) {
    for (int chunk = 0; chunk < 2; ++chunk, ++local) {
      const plan::RunItemSlot s = plan::run_item_slot(local, tiles, 1, 1, true, heads);
      EXPECT_EQ(s.head, h);
      EXPECT_EQ(s.q_tile, tiles - 1);
      EXPECT_EQ(s.chunk, chunk);
      EXPECT_EQ(s.slot, h);
    }
  }
}

TEST(KvSplitRuns, FirstHalvesStartBeforeSecondHalvesInsideAGroup) {
  // 8 tiles, 4 split, 16 heads (one group): all first halves, then all second halves.
  int last_first = -1, first_second = 1 << 30;
  for (int local = 0; local < 12 * 16; ++local) {
    const plan::RunItemSlot s = plan::run_item_slot(local, 8, 4, 16);
    if (s.chunk == 0) last_first = local;
    if (s.chunk == 1) first_second = std::min(first_second, local);
  }
  EXPECT_LT(last_first, first_second);
}

const KvSplitSettings kTailH200{0, 1 << 30, kSms};

TEST(KvSplitTailRule, TheLongNonCausalSequenceSplitsItsLastTile) {
  // 1x32768 at 16 heads: 4096 items = 31 rounds of 132 + 4; its last q tile's 16 items split in
  // halves of 128 kv tiles, run last: 32 rounds of whole items -> 31.5.
  const KvSplit k = kv_split_for(32768, 32768, false, -1, 16, 128, 128, kTailH200);
  EXPECT_EQ(k.split_tiles, 1);
  EXPECT_EQ(k.chunk_tiles, 128);
  EXPECT_TRUE(k.halves_last);
  EXPECT_EQ(plan::tail_makespan(4096, 0, kSms), 64);
  EXPECT_EQ(plan::tail_makespan(4096 - 16, 32, kSms), 63);
  // The small-sequence rule alone (kOn's other half) does not split it: it fills the grid.
  EXPECT_EQ(kv_split_for(32768, 32768, false, -1, 16, 128, 128, kOnH200).chunk_tiles, 0);
}

TEST(KvSplitTailRule, NoTailSplitWhereItCannotHelpOrIsNotAllowed) {
  EXPECT_EQ(kv_split_for(32768, 32768, true, -1, 16, 128, 128, kTailH200).chunk_tiles, 0);   // causal
  EXPECT_EQ(kv_split_for(32768, 32768, false, 512, 16, 128, 128, kTailH200).chunk_tiles, 0); // window
  EXPECT_EQ(kv_split_for(32768, 32768, false, -1, 64, 128, 128, kTailH200).chunk_tiles, 0);  // heads > 32
  EXPECT_EQ(kv_split_for(4096, 4096, false, -1, 16, 128, 128, kTailH200).chunk_tiles, 0);    // < 4 rounds
  EXPECT_EQ(kv_split_for(32768, 300, false, -1, 16, 128, 128, kTailH200).chunk_tiles, 0);    // 3 kv tiles
  // 44 q tiles x 12 heads = 528 items: exactly 4 rounds, nothing idles.
  EXPECT_EQ(kv_split_for(44 * 128, 8192, false, -1, 12, 128, 128, kTailH200).chunk_tiles, 0);
  EXPECT_EQ(kv_split_for(32768, 32768, false, -1, 16, 128, 128, KvSplitSettings{}).chunk_tiles, 0);  // off
}

// List scheduling of a run's items in its order (run_item_slot) on `grid` blocks, in kv tiles.
int64_t simulated_makespan(int tiles, int heads, int n, const KvSplit& k, int grid) {
  std::vector<int64_t> free_at(grid, 0);
  const int items = (tiles + k.split_tiles) * heads;
  for (int local = 0; local < items; ++local) {
    const plan::RunItemSlot s = plan::run_item_slot(local, tiles, k.split_tiles, 1, k.halves_last, heads);
    const int64_t cost = s.chunk < 0 ? n : s.chunk == 0 ? k.chunk_tiles : n - k.chunk_tiles;
    auto it = std::min_element(free_at.begin(), free_at.end());
    *it += cost;
  }
  return *std::max_element(free_at.begin(), free_at.end());
}

TEST(KvSplitTailRule, EverySplitShortensTheSimulatedLaunchAsPredicted) {
  // Every (heads, q tiles) up to 32 heads and 300 tiles with an even kv tile count: where the
  // rule splits, list scheduling in the run's real order ends sooner than without the split,
  // at the predicted makespan.
  int fired = 0;
  for (int heads = 1; heads <= plan::kTailMaxHeads; ++heads) {
    for (int tiles = 1; tiles <= 300; ++tiles) {
      const int n = 64;
      const KvSplit k = kv_split_for(int64_t{tiles} * 128, int64_t{n} * 128, false, -1, heads, 128, 128, kTailH200);
      if (k.chunk_tiles == 0) continue;
      ++fired;
      const int64_t whole = simulated_makespan(tiles, heads, n, KvSplit{}, kSms);
      const int64_t split = simulated_makespan(tiles, heads, n, k, kSms);
      ASSERT_LT(split, whole) << heads << " heads, " << tiles << " tiles";
      EXPECT_EQ(split, plan::tail_makespan(int64_t{tiles} * heads - heads, 2 * heads, kSms) * (n / 2))
          << heads << " heads, " << tiles << " tiles";
    }
  }
  EXPECT_GT(fired, 500);
}

std::vector<int32_t> prefix(const std::vector<int32_t>& lens) {
  std::vector<int32_t> p = {0};
  for (int32_t l : lens) p.push_back(p.back() + l);
  return p;
}

// The scheduler's runs: item and slot ranges tile [0, items) and [0, slots) exactly, and a
// sequence's split is the same alone as inside any batch (batch invariance of the rule).
TEST(KvSplitRuns, RangesTileAndEachSequenceSplitsAsItWouldAlone) {
  std::mt19937 rng(11);
  const int heads = 16, max_batch = 12;
  const int64_t bound = plan::kv_split_slot_bound(max_batch, 20000, heads, 128, kSms);
  plan::Scheduler s(max_batch, 20000, 40000, 128, 128, KvSplitSettings{kSms, bound});
  plan::Scheduler alone(1, 20000, 40000, 128, 128, KvSplitSettings{kSms, bound});
  std::vector<plan::SeqRun> runs(max_batch), one(1);
  for (int trial = 0; trial < 200; ++trial) {
    const int batch = 1 + rng() % max_batch;
    std::vector<int32_t> q, k;
    for (int b = 0; b < batch; ++b) {
      q.push_back(rng() % 5 == 0 ? 0 : 1 + rng() % 1500);
      k.push_back(q.back() + (rng() % 3 == 0 ? rng() % 1500 : 0));
    }
    const std::vector<int32_t> qo = prefix(q), kv = prefix(k);
    const plan::ScheduleResult r = s.build_runs(qo.data(), kv.data(), batch, true, -1, heads, runs.data());
    int32_t item = 0, slot = 0;
    for (int i = 0; i < r.num_runs; ++i) {
      const plan::SeqRun& run = runs[i];
      EXPECT_EQ(run.item_begin, item);
      EXPECT_EQ(run.slot_begin, slot);
      item += (run.num_tiles + run.split_tiles) * heads;
      slot += run.split_tiles * heads;
      const int32_t qa[2] = {0, q[run.seq]}, ka[2] = {0, k[run.seq]};
      alone.build_runs(qa, ka, 1, true, -1, heads, one.data());
      EXPECT_EQ(one[0].split_tiles, run.split_tiles) << "seq " << run.seq;
      EXPECT_EQ(one[0].chunk_tiles, run.chunk_tiles) << "seq " << run.seq;
    }
    EXPECT_EQ(r.num_items, item);
    EXPECT_EQ(r.split_slots, slot);
    EXPECT_LE(slot, bound);
  }
}

TEST(KvSplitRuns, SlotBoundHoldsForTheWorstBatches) {
  // Many short prompts that each split, up to the capacity.
  const int heads = 16, max_batch = 40;
  const int64_t max_q = 40 * 640;
  const int64_t bound = plan::kv_split_slot_bound(max_batch, max_q, heads, 128, kSms);
  plan::Scheduler s(max_batch, max_q, 4 * max_q, 128, 128, KvSplitSettings{kSms, bound});
  std::vector<plan::SeqRun> runs(max_batch);
  for (int len : {513, 640, 1, 999}) {
    const int batch = static_cast<int>(std::min<int64_t>(max_batch, max_q / len));
    std::vector<int32_t> q(batch, len), k(batch, len + 1000);
    const std::vector<int32_t> qo = prefix(q), kv = prefix(k);
    plan::ScheduleResult r;
    ASSERT_NO_THROW(r = s.build_runs(qo.data(), kv.data(), batch, true, -1, heads, runs.data())) << len;
    EXPECT_GT(r.split_slots, 0) << len;
    EXPECT_LE(r.split_slots, bound) << len;
  }
}

TEST(KvSplitRuns, TailSplitsAreTheSameInsideAnyBatchAndWithinTheBound) {
  std::mt19937 rng(13);
  const int heads = 16, max_batch = 8;
  const int64_t max_q = 40000;
  const int64_t bound = plan::kv_split_slot_bound(max_batch, max_q, heads, 128, kSms, kSms);
  const KvSplitSettings both{kSms, bound, kSms};
  plan::Scheduler s(max_batch, max_q, 4 * max_q, 128, 128, both);
  plan::Scheduler alone(1, max_q, 4 * max_q, 128, 128, both);
  std::vector<plan::SeqRun> runs(max_batch), one(1);
  int tail_runs = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int batch = 1 + rng() % max_batch;
    std::vector<int32_t> q, k;
    int64_t left = max_q;
    for (int b = 0; b < batch; ++b) {
      const int32_t len = static_cast<int32_t>(std::min<int64_t>(left, rng() % 3 == 0 ? 4000 + rng() % 9000 : rng() % 1500));
      left -= len;
      q.push_back(len);
      k.push_back(len + rng() % 5000);
    }
    const std::vector<int32_t> qo = prefix(q), kv = prefix(k);
    const plan::ScheduleResult r = s.build_runs(qo.data(), kv.data(), batch, false, -1, heads, runs.data());
    for (int i = 0; i < r.num_runs; ++i) {
      const plan::SeqRun& run = runs[i];
      const int32_t qa[2] = {0, q[run.seq]}, ka[2] = {0, k[run.seq]};
      alone.build_runs(qa, ka, 1, false, -1, heads, one.data());
      EXPECT_EQ(one[0].split_tiles, run.split_tiles) << "seq " << run.seq;
      EXPECT_EQ(one[0].chunk_tiles, run.chunk_tiles) << "seq " << run.seq;
      EXPECT_EQ(one[0].halves_last, run.halves_last) << "seq " << run.seq;
      if (run.halves_last) EXPECT_EQ(run.split_tiles, 1) << "the halves-last order decodes one split tile";
      tail_runs += run.halves_last;
    }
    EXPECT_LE(r.split_slots, bound);
  }
  EXPECT_GT(tail_runs, 10);
  // The worst batches for the tail rule: as many sequences of the fewest q tiles it may split
  // (33 x 16 heads = 528 items = 4 rounds) as the capacity holds.
  for (int64_t lq : {int64_t{32 * 128 + 1}, int64_t{35 * 128}, int64_t{40 * 128 - 5}}) {
    const int batch = static_cast<int>(std::min<int64_t>(max_batch, max_q / lq));
    std::vector<int32_t> q(batch, static_cast<int32_t>(lq)), k(batch, 8192);
    const std::vector<int32_t> qo = prefix(q), kv = prefix(k);
    plan::ScheduleResult r;
    ASSERT_NO_THROW(r = s.build_runs(qo.data(), kv.data(), batch, false, -1, heads, runs.data())) << lq;
    EXPECT_LE(r.split_slots, bound) << lq;
  }
}

void fake_launch(const cuda::PrefillArgs&, int, Stream) {}
int fake_occupancy() { return 1; }

TEST(KvSplitSizing, OnSizesTheSlotsAutoAndOffNever) {
  cuda::KernelEntry e{"sm90_bf16_192x128", 90, DType::kBF16, 192, 128, 128, 128, 1, 128, 640,
                      size_t{139392}, &fake_launch, &fake_occupancy};
  cuda::KernelChoice base{};
  base.block_m = base.block_n = 128;
  base.grid_blocks = kSms;
  base.arch = 90;
  base.entry = &e;
  base.scratch_bytes = 128 + 640 * kSms;

  cuda::KernelChoice small = base;  // one sequence of up to 999 tokens: 131 slots, ~17 MiB
  plan::size_kv_split(small, KvSplitMode::kOn, 1, 999, 16);
  EXPECT_EQ(small.split_max_items, kSms);
  EXPECT_EQ(small.split_slots, 131);
  EXPECT_EQ(small.scratch_bytes, cuda::split_region_offset(128, 640, kSms) + 131 * size_t{139392});

  // kAuto leaves the small-sequence rule off (measured slower: docs/performance.md) and turns
  // the tail rule on: slots for the sequences of >= 4 rounds the capacity holds, 16 heads each.
  for (int max_batch : {1, 256}) {
    cuda::KernelChoice autod = base;
    plan::size_kv_split(autod, KvSplitMode::kAuto, max_batch, 8192, 16);
    EXPECT_EQ(autod.split_max_items, 0);
    EXPECT_EQ(autod.split_tail_grid, kSms);
    EXPECT_EQ(autod.split_slots, 16);  // one sequence of > 32 x 128 tokens fits 8192
    EXPECT_EQ(autod.scratch_bytes, cuda::split_region_offset(128, 640, kSms) + 16 * size_t{139392});
  }
  cuda::KernelChoice short_cap = base;  // no sequence of 4 rounds fits: nothing to size
  plan::size_kv_split(short_cap, KvSplitMode::kAuto, 8, 4096, 16);
  EXPECT_EQ(short_cap.split_slots, 0);
  EXPECT_EQ(short_cap.scratch_bytes, base.scratch_bytes);
  cuda::KernelChoice many_heads = base;  // 128 heads: the tail rule is off
  plan::size_kv_split(many_heads, KvSplitMode::kAuto, 8, 65536, 128);
  EXPECT_EQ(many_heads.split_tail_grid, 0);
  EXPECT_EQ(many_heads.split_slots, 0);
  cuda::KernelChoice forced = base;
  plan::size_kv_split(forced, KvSplitMode::kOn, 256, 8192, 16);
  EXPECT_EQ(forced.split_max_items, kSms);
  EXPECT_GT(forced.scratch_bytes, size_t{64} << 20);  // an engine's capacity: ~700 MB of slots
  cuda::KernelChoice off = base;
  plan::size_kv_split(off, KvSplitMode::kOff, 1, 65536, 16);
  EXPECT_EQ(off.split_max_items, 0);
  EXPECT_EQ(off.split_tail_grid, 0);
  EXPECT_EQ(off.scratch_bytes, base.scratch_bytes);

  e.split_slot_bytes = 0;  // a kernel that cannot split
  cuda::KernelChoice cannot = base;
  plan::size_kv_split(cannot, KvSplitMode::kOn, 1, 999, 16);
  EXPECT_EQ(cannot.split_max_items, 0);
  cuda::KernelChoice cpu{};  // the CPU backend
  plan::size_kv_split(cpu, KvSplitMode::kOn, 1, 999, 16);
  EXPECT_EQ(cpu.split_max_items, 0);
}

}  // namespace
}  // namespace mlakit
