// The MLA plan block (src/mla/mla_plan_build): the new tokens' slots from the block table or an
// explicit slot mapping, gather maps of the one-launch and the chunked layouts (context rows by
// cache slot, new tokens by index: the first launch's gather writes them into the cache, so each
// must be there exactly once and never be read back from a slot), per-launch row counts,
// graph_rows padding and the header the kernels read.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

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

Built build(const MlaConfig& c, const MlaPlanOptions& o = {}, const int64_t* slot_mapping = nullptr) {
  const MlaLayout l = make_layout(c, 64);
  MlaBatch b;
  b.batch_size = 3;
  b.query_lens = kQ.data();
  b.context_lens = kCtx.data();
  b.block_table = kTable.data();
  b.block_table_cols = 3;
  b.slot_mapping = slot_mapping;
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

}  // namespace
}  // namespace mla
}  // namespace mlakit
