// The MLA plan block (src/mla/mla_plan_build): the new tokens' slots from the block table or an
// explicit slot mapping, gather maps of the one-launch and the chunked layouts (context rows by
// cache slot, new tokens by index: the first launch's gather writes them into the cache, so each
// must be there exactly once and never be read back from a slot), per-launch row counts,
// graph_rows padding, the header the kernels read, a simulation of the fused gather on random
// steps, and no allocation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "alloc_count.h"
#include "mla/gather_entry.h"
#include "mla/mla_checks.h"
#include "mlakit/error.h"
#include "mla/mla_layout.h"
#include "mla/mla_plan_build.h"

namespace mlakit {
namespace mla {
namespace {

MlaConfig tiny(int64_t workspace_rows) {
  MlaConfig c;
  c.num_heads = 2;
  c.kv_lora_rank = 16;
  c.block_size = 4;
  c.num_blocks = 20;
  c.max_batch = 3;
  c.max_tokens = 10;
  c.max_context_tokens = 12;
  c.workspace_rows = workspace_rows;
  return c;
}

struct Built {
  std::vector<uint8_t> block;
  StepPlan plan;
  const int32_t* i32(size_t off) const { return reinterpret_cast<const int32_t*>(block.data() + off); }
  MlaHeader header() const {
    MlaHeader h;
    std::memcpy(&h, block.data(), sizeof(h));
    return h;
  }
};

// Requests: r0 ctx 5 + 2 new, r1 ctx 0 + 3 new, r2 ctx 6 + 1 new. Blocks of 4 positions.
const std::vector<int32_t> kQ = {2, 3, 1}, kCtx = {5, 0, 6};
const std::vector<int32_t> kTable = {7, 3, 11,   // r0: positions 0-3 in block 7, 4-7 in block 3
                                     0, 19, 19,  // r1
                                     5, 6, 2};   // r2
int32_t slot(int r, int p) { return kTable[r * 3 + p / 4] * 4 + p % 4; }

// The three requests above as a batch.
MlaBatch fixed_batch(const int64_t* slot_mapping = nullptr) {
  MlaBatch b;
  b.batch_size = 3;
  b.query_lens = kQ.data();
  b.context_lens = kCtx.data();
  b.block_table = kTable.data();
  b.block_table_cols = 3;
  b.slot_mapping = slot_mapping;
  return b;
}

Built build(const MlaConfig& c, const MlaPlanOptions& o = {}, const int64_t* slot_mapping = nullptr) {
  const MlaLayout l = make_layout(c, 64);
  const MlaBatch b = fixed_batch(slot_mapping);
  const BatchTotals t = check_batch(c, l, b, o);
  Built r;
  r.block.assign(l.plan_bytes, 0xEE);
  cuda::KernelChoice k{};  // the CPU backend's tile, tile-list schedule
  k.block_m = 64;
  k.block_n = 64;
  PlanBuilder pb(c, l, k);
  pb.build(b, o, t, r.block.data(), &r.plan);
  EXPECT_LE(r.plan.used_bytes, l.plan_bytes);
  return r;
}

TEST(MlaPlanBuild, OneLaunchContextAheadOfNewTokens) {
  const MlaConfig c = tiny(0);
  const MlaLayout l = make_layout(c, 64);
  const Built b = build(c);
  ASSERT_EQ(b.plan.launches.size(), 1u);
  EXPECT_FALSE(b.plan.totals.chunked);
  EXPECT_EQ(b.plan.launches[0].rows, 17);  // 5 + 2 + 0 + 3 + 6 + 1
  EXPECT_EQ(b.header().total_q, 6);
  EXPECT_EQ(b.header().chunked, 0);
  EXPECT_EQ(b.i32(l.counts_offset)[0], 17);
  // New tokens: r0 positions 5, 6; r1 0, 1, 2; r2 6.
  const std::vector<int32_t> want_slots = {slot(0, 5), slot(0, 6), slot(1, 0), slot(1, 1), slot(1, 2), slot(2, 6)};
  for (size_t i = 0; i < want_slots.size(); ++i) EXPECT_EQ(b.i32(l.slots_offset)[i], want_slots[i]) << i;
  // Gather: each request's context slots, then its new tokens by index (~t), not by slot.
  std::vector<int32_t> want;
  for (int r = 0, t = 0; r < 3; ++r) {
    for (int p = 0; p < kCtx[r]; ++p) want.push_back(slot(r, p));
    for (int j = 0; j < kQ[r]; ++j) want.push_back(~t++);
  }
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(b.i32(l.gather_offset)[i], want[i]) << i;
  EXPECT_TRUE(b.plan.launches[0].new_tokens);
  // The attention schedule: kv = [context; new] per request, causal.
  const uint8_t* blk = b.block.data() + l.block_offset(0);
  const auto* kv = reinterpret_cast<const int32_t*>(blk + l.schedule.kv_indptr_offset);
  EXPECT_EQ(kv[1], 7);
  EXPECT_EQ(kv[2], 10);
  EXPECT_EQ(kv[3], 17);
  const auto* qo = reinterpret_cast<const int32_t*>(blk + l.schedule.qo_indptr_offset);
  EXPECT_EQ(qo[3], 6);
}

TEST(MlaPlanBuild, ChunkedContextAndGraphRows) {
  // 11 context + 6 new rows > 8 workspace rows: new tokens first, then context chunks of 8.
  const MlaConfig c = tiny(8);
  const MlaLayout l = make_layout(c, 64);
  const Built b = build(c);
  ASSERT_TRUE(b.plan.totals.chunked);
  ASSERT_EQ(b.plan.launches.size(), 3u);  // new + ceil(11 / 8) chunks
  EXPECT_EQ(b.header().num_chunks, 2);
  EXPECT_EQ(b.i32(l.counts_offset)[0], 6);
  EXPECT_EQ(b.i32(l.counts_offset)[1], 8);
  EXPECT_EQ(b.i32(l.counts_offset)[2], 3);
  EXPECT_FALSE(b.plan.launches[1].causal);
  // Launch 0: the new tokens alone, by index (its gather writes them); the chunks read the cache.
  EXPECT_TRUE(b.plan.launches[0].new_tokens);
  EXPECT_FALSE(b.plan.launches[1].new_tokens);
  EXPECT_FALSE(b.plan.launches[2].new_tokens);
  for (int t = 0; t < 6; ++t) EXPECT_EQ(b.i32(l.gather_offset)[t], ~t) << t;
  // Concatenated contexts: r0 0-4, r2 0-5; chunk 0 = r0 0-4 + r2 0-2, chunk 1 = r2 3-5.
  const int32_t* g = b.i32(l.gather_offset);
  EXPECT_EQ(b.plan.launches[1].gather_begin, 6);
  EXPECT_EQ(g[6], slot(0, 0));
  EXPECT_EQ(g[10], slot(0, 4));
  EXPECT_EQ(g[11], slot(2, 0));
  EXPECT_EQ(g[14], slot(2, 3));
  EXPECT_EQ(g[16], slot(2, 5));
  const auto* kv1 = reinterpret_cast<const int32_t*>(b.block.data() + l.block_offset(1) + l.schedule.kv_indptr_offset);
  EXPECT_EQ(kv1[1], 5);
  EXPECT_EQ(kv1[2], 5);  // r1 has no context
  EXPECT_EQ(kv1[3], 8);

  // graph_rows pads the one launch; a step that needs chunks cannot be padded.
  MlaPlanOptions o;
  o.graph_rows = 20;
  const Built p = build(tiny(20), o);
  EXPECT_EQ(p.plan.launches[0].rows, 20);
  EXPECT_EQ(p.i32(make_layout(tiny(20), 64).counts_offset)[0], 17);
  EXPECT_THROW(build(c, o), Error);
}

TEST(MlaPlanBuild, ExplicitSlotMapping) {
  const MlaConfig c = tiny(0);
  const MlaLayout l = make_layout(c, 64);
  const std::vector<int64_t> sm = {40, 41, 60, 61, 62, 79};
  const Built b = build(c, {}, sm.data());
  for (size_t i = 0; i < sm.size(); ++i) EXPECT_EQ(b.i32(l.slots_offset)[i], sm[i]);
  // The gather takes new tokens from kv_c / k_pe (by index) and writes them to these slots.
  EXPECT_EQ(b.i32(l.gather_offset)[5], ~0);
  EXPECT_EQ(b.i32(l.gather_offset)[16], ~5);
  EXPECT_EQ(b.i32(l.gather_offset)[4], slot(0, 4));  // context rows still by the block table
}

// A random step: lengths (context 0 for some requests, a request with no new token), a shuffled
// block table without repeated blocks, every workspace size from one launch to many chunks.
struct RandomStep {
  MlaConfig cfg;
  std::vector<int32_t> q, ctx, table;
  int cols = 0;
  MlaBatch batch() const {
    MlaBatch b;
    b.batch_size = static_cast<int>(q.size());
    b.query_lens = q.data();
    b.context_lens = ctx.data();
    b.block_table = table.data();
    b.block_table_cols = cols;
    return b;
  }
  int32_t slot(int r, int64_t p) const {
    return table[static_cast<size_t>(r * cols + p / cfg.block_size)] * cfg.block_size +
           static_cast<int32_t>(p % cfg.block_size);
  }
};

RandomStep random_step(std::mt19937& rng, int block_size, int64_t workspace_rows) {
  RandomStep s;
  const int n = 1 + static_cast<int>(rng() % 5);
  std::uniform_int_distribution<int> len(0, 70);
  int64_t blocks = 0;
  for (int r = 0; r < n; ++r) {
    s.q.push_back(r == 1 ? 0 : 1 + len(rng) % 40);
    s.ctx.push_back(rng() % 3 == 0 ? 0 : len(rng));
    const int64_t need = (s.q.back() + s.ctx.back() + block_size - 1) / block_size;
    s.cols = std::max<int>(s.cols, static_cast<int>(need));
    blocks += need;
  }
  s.cols += 1;
  MlaConfig& c = s.cfg;
  c.num_heads = 2;
  c.kv_lora_rank = 16;
  c.block_size = block_size;
  c.num_blocks = blocks + 2;
  c.max_batch = n;
  c.max_tokens = std::max<int64_t>(1, std::accumulate(s.q.begin(), s.q.end(), int64_t{0}));
  c.max_context_tokens = std::accumulate(s.ctx.begin(), s.ctx.end(), int64_t{0});
  c.workspace_rows = workspace_rows > 0 ? std::max(workspace_rows, c.max_tokens) : 0;
  std::vector<int32_t> ids(static_cast<size_t>(c.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  s.table.assign(static_cast<size_t>(n * s.cols), 0);
  size_t next = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t need = (s.q[r] + s.ctx[r] + block_size - 1) / block_size;
    for (int64_t i = 0; i < need; ++i) s.table[static_cast<size_t>(r * s.cols + i)] = ids[next++];
  }
  return s;
}

// What (request, position) a cache slot or latent row holds, as one number; -1: nothing.
int64_t label(int r, int64_t p) { return static_cast<int64_t>(r) * 1000000 + p; }

TEST(MlaPlanBuild, FusedCacheWriteSimulatedOverRandomSteps) {
  // Runs the plan's launches on labels instead of latents, with the fused gather's semantics
  // (mla_ops.h), in launch order: every launch must see each row it attends as the right
  // (request, position), the cache must end with each new token at its slot and nothing else
  // changed, and no launch may read a slot that the first launch's gather writes.
  std::mt19937 rng(7);
  for (int bs : {1, 4, 16, 64}) {
    for (int64_t ws : {int64_t{0}, int64_t{1}, int64_t{13}, int64_t{64}}) {
      for (int iter = 0; iter < 20; ++iter) {
        SCOPED_TRACE("block_size " + std::to_string(bs) + " workspace " + std::to_string(ws) + " iter " +
                     std::to_string(iter));
        const RandomStep st = random_step(rng, bs, ws);
        const MlaConfig& c = st.cfg;
        const MlaLayout l = make_layout(c, 64);
        const MlaBatch b = st.batch();
        const BatchTotals t = check_batch(c, l, b, {});
        std::vector<uint8_t> block(l.plan_bytes, 0xEE);
        cuda::KernelChoice k{};
        k.block_m = k.block_n = 64;
        StepPlan plan;
        PlanBuilder(c, l, k).build(b, {}, t, block.data(), &plan);
        const auto* counts = reinterpret_cast<const int32_t*>(block.data() + l.counts_offset);
        const auto* slots = reinterpret_cast<const int32_t*>(block.data() + l.slots_offset);
        const auto* map = reinterpret_cast<const int32_t*>(block.data() + l.gather_offset);

        // The cache holds every request's context; new token i is (r, ctx + j) in kv_c.
        std::vector<int64_t> cache(static_cast<size_t>(c.num_blocks * bs), -1), fresh;
        for (int r = 0; r < b.batch_size; ++r) {
          for (int64_t p = 0; p < st.ctx[r]; ++p) cache[static_cast<size_t>(st.slot(r, p))] = label(r, p);
          for (int64_t j = 0; j < st.q[r]; ++j) fresh.push_back(label(r, st.ctx[r] + j));
        }
        std::vector<int64_t> want_cache = cache;
        std::vector<bool> written(cache.size(), false);
        for (int r = 0, i = 0; r < b.batch_size; ++r) {
          for (int64_t j = 0; j < st.q[r]; ++j, ++i) {
            EXPECT_EQ(slots[i], st.slot(r, st.ctx[r] + j));
            want_cache[static_cast<size_t>(slots[i])] = fresh[static_cast<size_t>(i)];
            written[static_cast<size_t>(slots[i])] = true;
          }
        }

        std::vector<int> seen(fresh.size(), 0);
        std::vector<std::vector<int64_t>> rows(plan.launches.size());
        for (size_t li = 0; li < plan.launches.size(); ++li) {
          const LaunchPlan& lp = plan.launches[li];
          EXPECT_EQ(lp.new_tokens, li == 0);
          ASSERT_LE(counts[li], lp.rows);
          for (int64_t r = 0; r < counts[li]; ++r) {
            const int32_t e = map[lp.gather_begin + r];
            if (is_new_token_entry(e)) {
              const int32_t tok = new_token_of(e);
              ASSERT_TRUE(lp.new_tokens) << "a new token outside the writing launch";
              ASSERT_GE(tok, 0);
              ASSERT_LT(tok, static_cast<int32_t>(fresh.size()));
              ++seen[static_cast<size_t>(tok)];
              cache[static_cast<size_t>(slots[tok])] = fresh[static_cast<size_t>(tok)];
              rows[li].push_back(fresh[static_cast<size_t>(tok)]);
            } else {
              ASSERT_LT(static_cast<size_t>(e), cache.size());
              EXPECT_FALSE(written[static_cast<size_t>(e)]) << "a launch reads a slot the step writes";
              rows[li].push_back(cache[static_cast<size_t>(e)]);
            }
          }
        }
        for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "new token " << i;
        EXPECT_EQ(cache, want_cache);

        // The rows each launch's attention schedule expects.
        std::vector<std::vector<int64_t>> want_rows;
        if (!t.chunked) {
          want_rows.emplace_back();
          for (int r = 0; r < b.batch_size; ++r)
            for (int64_t p = 0; p < st.ctx[r] + st.q[r]; ++p) want_rows[0].push_back(label(r, p));
        } else {
          want_rows.push_back(fresh);
          std::vector<int64_t> ctx_rows;
          for (int r = 0; r < b.batch_size; ++r)
            for (int64_t p = 0; p < st.ctx[r]; ++p) ctx_rows.push_back(label(r, p));
          for (size_t c0 = 0; c0 < ctx_rows.size(); c0 += static_cast<size_t>(l.rows)) {
            const size_t c1 = std::min(ctx_rows.size(), c0 + static_cast<size_t>(l.rows));
            want_rows.emplace_back(ctx_rows.begin() + static_cast<std::ptrdiff_t>(c0),
                                   ctx_rows.begin() + static_cast<std::ptrdiff_t>(c1));
          }
        }
        EXPECT_EQ(rows, want_rows);
      }
    }
  }
}

TEST(MlaPlanBuild, BuildAllocatesNothing) {
  // The plan runs on the host every engine step: after construction (and a StepPlan reserved
  // for the launches, as MlaStep does) building it must not touch the heap.
  const MlaConfig c = tiny(8);
  const MlaLayout l = make_layout(c, 64);
  const MlaBatch b = fixed_batch();
  const BatchTotals t = check_batch(c, l, b, {});
  std::vector<uint8_t> block(l.plan_bytes);
  cuda::KernelChoice k{};
  k.block_m = k.block_n = 64;
  PlanBuilder pb(c, l, k);
  StepPlan plan;
  plan.launches.reserve(static_cast<size_t>(1 + l.max_chunks));
  test::AllocCounter allocs;
  const BatchTotals t2 = check_batch(c, l, b, {});
  pb.build(b, {}, t2, block.data(), &plan);
  EXPECT_EQ(allocs.count(), 0);
  EXPECT_EQ(t2.chunked, t.chunked);
  EXPECT_EQ(plan.launches.size(), 3u);
}

}  // namespace
}  // namespace mla
}  // namespace mlakit
