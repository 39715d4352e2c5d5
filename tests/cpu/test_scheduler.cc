// Planner invariants on random batches, checked against brute force.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "plan/run_order.h"
#include "plan/schedule_block.h"
#include "plan/scheduler.h"
#include "util/test_util.h"

namespace mlakit {
namespace {

using plan::KvRange;
using plan::Scheduler;
using plan::WorkTile;

bool brute_visible(int64_t i, int64_t j, int64_t lq, int64_t lk, bool causal, int w) {
  const int64_t diag = lk - lq + i;
  if (causal && j > diag) return false;
  if (w >= 0 && j < diag - w) return false;
  return j >= 0 && j < lk;
}

int64_t brute_pairs(int64_t lq, int64_t lk, bool causal, int w) {
  int64_t n = 0;
  for (int64_t i = 0; i < lq; ++i)
    for (int64_t j = 0; j < lk; ++j) n += brute_visible(i, j, lq, lk, causal, w);
  return n;
}

struct Mask {
  bool causal;
  int window;
};
const Mask kMasks[] = {{false, -1}, {true, -1}, {false, 0}, {false, 5}, {true, 0}, {true, 3}, {true, 70}, {false, 200}};

TEST(VisibleKvRange, MatchesBruteForce) {
  const std::pair<int64_t, int64_t> lens[] = {{1, 1}, {5, 9}, {9, 9}, {9, 5}, {1, 17}, {17, 1},
                                               {64, 130}, {130, 64}, {33, 33}, {3, 0}};
  for (const Mask& m : kMasks) {
    for (auto [lq, lk] : lens) {
      for (int64_t i = 0; i < lq; ++i) {
        const KvRange r = plan::visible_kv_range(i, lq, lk, m.causal, m.window);
        for (int64_t j = 0; j < lk; ++j) {
          const bool in = !r.empty() && j >= r.lo && j < r.hi;
          ASSERT_EQ(in, brute_visible(i, j, lq, lk, m.causal, m.window))
              << "lq=" << lq << " lk=" << lk << " row=" << i << " j=" << j << " causal=" << m.causal
              << " w=" << m.window;
        }
        // The range never leaves [0, lk) when non-empty.
        if (!r.empty()) {
          EXPECT_GE(r.lo, 0);
          EXPECT_LE(r.hi, lk);
        }
      }
    }
  }
}

TEST(VisiblePairs, ClosedFormMatchesBruteForce) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> len(0, 90);
  for (int it = 0; it < 400; ++it) {
    const int64_t lq = len(rng), lk = len(rng);
    for (const Mask& m : kMasks) {
      ASSERT_EQ(plan::visible_pairs(lq, lk, m.causal, m.window), brute_pairs(lq, lk, m.causal, m.window))
          << "lq=" << lq << " lk=" << lk << " causal=" << m.causal << " w=" << m.window;
    }
  }
}

// Checks every invariant of one schedule against an independent computation.
void check_schedule(const std::vector<int32_t>& qlen, const std::vector<int32_t>& klen, bool causal,
                    int w, int bm, int bn) {
  const auto qo = test::make_indptr(qlen), kv = test::make_indptr(klen);
  const int batch = static_cast<int>(qlen.size());
  Scheduler s(batch, qo.back(), kv.back(), bm, bn);
  std::vector<WorkTile> tiles(static_cast<size_t>(s.max_tiles()), WorkTile{-1, -1});
  const plan::ScheduleResult r = s.build(qo.data(), kv.data(), batch, causal, w, tiles.data());

  // Each (seq, q_tile) exactly once, none for lq == 0.
  std::map<std::pair<int, int>, int> seen;
  for (int t = 0; t < r.num_tiles; ++t) ++seen[{tiles[t].seq, tiles[t].q_tile}];
  int expected_tiles = 0;
  for (int b = 0; b < batch; ++b) {
    const int nt = (qlen[b] + bm - 1) / bm;
    expected_tiles += nt;
    for (int qt = 0; qt < nt; ++qt) {
      auto it = seen.find({b, qt});
      ASSERT_TRUE(it != seen.end()) << "missing tile seq=" << b << " q_tile=" << qt;
      EXPECT_EQ(it->second, 1) << "seq=" << b << " q_tile=" << qt;
    }
  }
  ASSERT_EQ(r.num_tiles, expected_tiles);
  ASSERT_EQ(static_cast<int>(seen.size()), expected_tiles) << "tiles outside any sequence";
  ASSERT_LE(r.num_tiles, s.max_tiles());

  // Costs non-increasing; ties in (seq, q_tile) order. Cost recomputed by brute force.
  auto cost = [&](const WorkTile& t) {
    const int64_t lq = qlen[t.seq], lk = klen[t.seq];
    int64_t lo = lk, hi = 0;
    for (int64_t i = int64_t{t.q_tile} * bm; i < std::min<int64_t>(lq, int64_t{t.q_tile + 1} * bm); ++i)
      for (int64_t j = 0; j < lk; ++j)
        if (brute_visible(i, j, lq, lk, causal, w)) { lo = std::min(lo, j); hi = std::max(hi, j + 1); }
    return hi > lo ? (hi + bn - 1) / bn - lo / bn + 1 : int64_t{1};
  };
  for (int t = 1; t < r.num_tiles; ++t) {
    const int64_t c0 = cost(tiles[t - 1]), c1 = cost(tiles[t]);
    ASSERT_GE(c0, c1) << "cost increases at position " << t;
    if (c0 == c1) {
      const bool ordered = tiles[t - 1].seq < tiles[t].seq ||
                           (tiles[t - 1].seq == tiles[t].seq && tiles[t - 1].q_tile < tiles[t].q_tile);
      ASSERT_TRUE(ordered) << "unstable tie order at position " << t;
    }
  }

  int64_t pairs = 0;
  for (int b = 0; b < batch; ++b) pairs += brute_pairs(qlen[b], klen[b], causal, w);
  EXPECT_EQ(r.visible_pairs, pairs);
}

TEST(Scheduler, InvariantsOnRandomBatches) {
  std::mt19937_64 rng(1234);
  const int block_shapes[][2] = {{64, 64}, {128, 64}, {16, 32}, {64, 128}};
  for (int it = 0; it < 60; ++it) {
    const int batch = 1 + static_cast<int>(rng() % 12);
    auto qlen = test::make_random_lengths(batch, rng);
    auto klen = test::make_random_lengths(batch, rng);
    const Mask& m = kMasks[it % (sizeof(kMasks) / sizeof(kMasks[0]))];
    const auto& bs = block_shapes[it % 4];
    SCOPED_TRACE("iteration " + std::to_string(it));
    check_schedule(qlen, klen, m.causal, m.window, bs[0], bs[1]);
  }
}

TEST(Scheduler, EmptyKvStillGetsTilesAndEmptyQGetsNone) {
  check_schedule({0, 70, 0, 1}, {50, 0, 0, 0}, true, -1, 64, 64);
  const auto qo = test::make_indptr({0, 70, 0, 1}), kv = test::make_indptr({50, 0, 0, 0});
  Scheduler s(4, qo.back(), kv.back(), 64, 64);
  std::vector<WorkTile> tiles(static_cast<size_t>(s.max_tiles()));
  auto r = s.build(qo.data(), kv.data(), 4, true, -1, tiles.data());
  ASSERT_EQ(r.num_tiles, 3);  // seq 1: 2 tiles, seq 3: 1 tile
  for (int t = 0; t < r.num_tiles; ++t) EXPECT_TRUE(tiles[t].seq == 1 || tiles[t].seq == 3);
  EXPECT_EQ(r.visible_pairs, 0);
}

TEST(Scheduler, LongestFirstForCausal) {
  // Causal lq == lk: the last q tile of the longest sequence visits the most kv tiles.
  const auto qo = test::make_indptr({256, 64}), kv = test::make_indptr({256, 64});
  Scheduler s(2, qo.back(), kv.back(), 64, 64);
  std::vector<WorkTile> tiles(static_cast<size_t>(s.max_tiles()));
  auto r = s.build(qo.data(), kv.data(), 2, true, -1, tiles.data());
  ASSERT_EQ(r.num_tiles, 5);
  EXPECT_EQ(tiles[0].seq, 0);
  EXPECT_EQ(tiles[0].q_tile, 3);
  // Ties (cost 2): seq 0 q_tile 0 before seq 1 q_tile 0.
  EXPECT_EQ(tiles[3].seq, 0);
  EXPECT_EQ(tiles[3].q_tile, 0);
  EXPECT_EQ(tiles[4].seq, 1);
}

TEST(Scheduler, ReusableAcrossBuildsAndZeroBatch) {
  Scheduler s(8, 4096, 4096, 64, 64);
  std::vector<WorkTile> tiles(static_cast<size_t>(s.max_tiles()));
  const int32_t zero[1] = {0};
  auto r0 = s.build(zero, zero, 0, false, -1, tiles.data());
  EXPECT_EQ(r0.num_tiles, 0);
  EXPECT_EQ(r0.visible_pairs, 0);
  const auto qo = test::make_indptr({100, 3}), kv = test::make_indptr({4000, 3});
  auto r1 = s.build(qo.data(), kv.data(), 2, false, -1, tiles.data());
  EXPECT_EQ(r1.num_tiles, 3);
  EXPECT_EQ(r1.visible_pairs, 100 * 4000 + 9);
  // Over capacity is rejected.
  const auto big = test::make_indptr({5000});
  EXPECT_TRUE(test::throws_error([&] { s.build(big.data(), big.data(), 1, false, -1, tiles.data()); },
                                 ErrorKind::kInvalidArgument, "batch_size"));
}

}  // namespace
}  // namespace mlakit

namespace mlakit {
namespace {

// The sm90 kernel's schedule: one run per sequence with q rows, longest first (ties by index),
// item ranges covering [0, tiles * H) exactly once.
TEST(SchedulerRuns, LongestSequenceFirstAndItemRangesTile) {
  plan::Scheduler s(8, 100000, 100000, 128, 128);
  const std::vector<int32_t> q = {300, 0, 999, 5, 999, 128};
  const std::vector<int32_t> k = {300, 10, 999, 900, 999, 4000};
  std::vector<int32_t> qo = {0}, kv = {0};
  for (size_t i = 0; i < q.size(); ++i) {
    qo.push_back(qo.back() + q[i]);
    kv.push_back(kv.back() + k[i]);
  }
  std::vector<plan::SeqRun> runs(8);
  const int heads = 3;
  const plan::ScheduleResult r = s.build_runs(qo.data(), kv.data(), 6, true, -1, heads, runs.data());
  ASSERT_EQ(r.num_runs, 5);  // sequence 1 has no q rows
  int tiles = 0;
  int64_t pairs = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    tiles += (q[i] + 127) / 128;
    pairs += plan::visible_pairs(q[i], k[i], true, -1);
  }
  EXPECT_EQ(r.num_tiles, tiles);
  EXPECT_EQ(r.visible_pairs, pairs);
  int32_t next = 0;
  for (int i = 0; i < r.num_runs; ++i) {
    EXPECT_EQ(runs[i].item_begin, next) << i;
    EXPECT_EQ(runs[i].num_tiles, (q[runs[i].seq] + 127) / 128);
    next += runs[i].num_tiles * heads;
    if (i > 0) {
      const bool ordered = runs[i - 1].cost > runs[i].cost ||
                           (runs[i - 1].cost == runs[i].cost && runs[i - 1].seq < runs[i].seq);
      EXPECT_TRUE(ordered) << "run " << i;
    }
  }
  EXPECT_EQ(next, tiles * heads);
  // The two 999-token sequences cost the same: the lower index comes first.
  int first999 = -1, second999 = -1;
  for (int i = 0; i < r.num_runs; ++i) {
    if (runs[i].seq == 2) first999 = i;
    if (runs[i].seq == 4) second999 = i;
  }
  EXPECT_LT(first999, second999);
  // Costs (kv tiles visited + 1 per q tile): a 999-token prompt 2+3+...+9 = 44, 128 rows
  // against 4000 keys 32 + 1 = 33, 300 tokens 2+3+4 = 9: the two prompts lead, then seq 5.
  EXPECT_EQ(runs[0].seq, 2);
  EXPECT_EQ(runs[0].cost, 44);
  EXPECT_EQ(runs[2].seq, 5);
  EXPECT_EQ(runs[2].cost, 33);
}

TEST(RunOrder, HeadGroupIsTheLargestDivisorUpToTheCap) {
  EXPECT_EQ(plan::run_head_group(1), 1);
  EXPECT_EQ(plan::run_head_group(16), 16);
  EXPECT_EQ(plan::run_head_group(128), 16);
  EXPECT_EQ(plan::run_head_group(24), 12);
  EXPECT_EQ(plan::run_head_group(20), 10);
  EXPECT_EQ(plan::run_head_group(17), 1);  // prime: one head per group
  EXPECT_EQ(plan::run_head_group(3), 3);
  // Tiles of equal cost (no causal mask, no window): head-major. (Grid unknown: the cap alone.)
  EXPECT_EQ(plan::run_head_group(16, false, -1, 0, 0), 1);
  EXPECT_EQ(plan::run_head_group(16, true, -1, 0, 0), 16);
  EXPECT_EQ(plan::run_head_group(16, false, 100, 0, 0), 16);
}

// Every (head, q tile) of a run exactly once; inside a group of heads the q tiles never get
// longer (the last tile is the longest under causal masking); groups in head order.
// A group holds about one grid's worth of items: ceil(grid / longest q tiles) heads at most.
TEST(RunOrder, HeadGroupHoldsAboutOneGridOfItems) {
  // 999-token prompts (8 q tiles of 128) on 132 blocks: the cap of 16.
  EXPECT_EQ(plan::run_head_group(16, true, -1, 8, 132), 16);
  EXPECT_EQ(plan::run_head_group(128, true, -1, 8, 132), 16);
  // H=128 x 8192 tokens (64 q tiles): ceil(132 / 64) = 3, the largest divisor of 128 up to 3 is 2.
  EXPECT_EQ(plan::run_head_group(128, true, -1, 64, 132), 2);
  EXPECT_EQ(plan::run_head_group(128, true, -1, 32, 132), 4);  // 4096 tokens: ceil(4.1) = 5 -> 4
  EXPECT_EQ(plan::run_head_group(16, true, -1, 128, 132), 2);  // 1x16384
  EXPECT_EQ(plan::run_head_group(16, true, -1, 200, 132), 1);  // more q tiles than blocks
  EXPECT_EQ(plan::run_head_group(24, true, -1, 40, 132), 4);   // ceil(3.3) = 4 divides 24
  EXPECT_EQ(plan::run_head_group(20, true, 64, 40, 132), 4);   // a window counts like causal
  // Unknown grid or no q tiles: the cap alone, as before.
  EXPECT_EQ(plan::run_head_group(128, true, -1, 64, 0), 16);
  EXPECT_EQ(plan::run_head_group(128, true, -1, 0, 132), 16);
  // Neither causal nor a window: head-major whatever the lengths.
  EXPECT_EQ(plan::run_head_group(16, false, -1, 8, 132), 1);
}

// The schedule header carries the group the batch's longest sequence and the grid decide.
TEST(RunOrder, ScheduleHeaderSizesTheGroupByTheLongestSequence) {
  const int bm = 128, bn = 128, heads = 128;
  auto header_group = [&](const std::vector<int32_t>& lens, bool causal, int grid) {
    std::vector<int32_t> indptr(lens.size() + 1, 0);
    for (size_t i = 0; i < lens.size(); ++i) indptr[i + 1] = indptr[i] + lens[i];
    const int batch = static_cast<int>(lens.size());
    const plan::ScheduleLayout l = plan::make_layout(batch, indptr.back(), bm, plan::ScheduleKind::kSequenceRuns);
    plan::Scheduler s(batch, indptr.back(), indptr.back(), bm, bn);
    std::vector<uint8_t> block(l.total_bytes, 0);
    PrefillOptions o;
    o.causal = causal;
    plan::write_schedule_block(block.data(), l, s, indptr.data(), indptr.data(), batch, o, 192,
                               plan::ScheduleKind::kSequenceRuns, heads, grid);
    plan::ScheduleHeader h;
    std::memcpy(&h, block.data(), sizeof(h));
    return h.head_group;
  };
  EXPECT_EQ(header_group({8192}, true, 132), 2);
  EXPECT_EQ(header_group({999, 999, 200}, true, 132), 16);
  EXPECT_EQ(header_group({999, 4096, 200}, true, 132), 4);  // the longest sequence decides
  EXPECT_EQ(header_group({8192}, true, 0), 16);             // grid unknown: the cap
  EXPECT_EQ(header_group({8192}, false, 132), 1);           // no mask: head-major
}

TEST(RunOrder, EachItemOnceLongestTilesFirstWithinAGroup) {
  for (int heads : {1, 3, 16, 24, 128}) {
    for (int tiles : {1, 2, 7, 64})
    for (int g : {plan::run_head_group(heads), plan::run_head_group(heads, true, -1, tiles, 132), 1}) {
      std::vector<int> seen(static_cast<size_t>(heads * tiles), 0);
      int prev_group = 0, prev_tile = tiles;
      for (int local = 0; local < heads * tiles; ++local) {
        const plan::RunSlot s = plan::run_slot(local, tiles, g);
        ASSERT_GE(s.head, 0);
        ASSERT_LT(s.head, heads);
        ASSERT_GE(s.q_tile, 0);
        ASSERT_LT(s.q_tile, tiles);
        ++seen[static_cast<size_t>(s.head * tiles + s.q_tile)];
        const int group = s.head / g;
        if (group == prev_group) {
          EXPECT_LE(s.q_tile, prev_tile) << "heads " << heads << " tiles " << tiles << " item " << local;
        } else {
          EXPECT_EQ(group, prev_group + 1);
          EXPECT_EQ(s.q_tile, tiles - 1);
        }
        prev_group = group;
        prev_tile = s.q_tile;
      }
      for (int c : seen) EXPECT_EQ(c, 1) << "heads " << heads << " tiles " << tiles << " group " << g;
    }
  }
}

}  // namespace
}  // namespace mlakit
