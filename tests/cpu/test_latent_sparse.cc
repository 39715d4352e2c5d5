// Sparse latent attention (DSA) on the CPU backend against the float64 reference: indices as
// request positions and as cache slots, -1 padding, repeated entries, the first and last key,
// entries past the bound (skipped), topk_length (full, 0, anything between), sinks, heads 1 to
// 128, page sizes 1 and 64, index rows that split (decode) and ones that do not (prefill); and a
// sparse plan naming every visible position equal, bit for bit, to the dense plan.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "mlakit/latent.h"
#include "util/latent_case.h"
#include "util/latent_check.h"

namespace mlakit {
namespace test {
namespace {

LatentConfig config(int heads, int block_size) {
  LatentConfig c;
  c.num_heads = heads;
  c.block_size = block_size;
  c.kv_split_size = 512;  // requests over 512 keys split (the CPU's default is 1024)
  return c;
}

void check_case(const LatentCase& m) {
  const LatentRef ref = latent_reference(m);
  expect_matches(run_latent(m), m, ref);
}

// heads, page size, index kind, topk
class CpuLatentSparse : public ::testing::TestWithParam<std::tuple<int, int, LatentIndices, int>> {};

TEST_P(CpuLatentSparse, MatchesReference) {
  const auto [heads, bs, kind, topk] = GetParam();
  // Decode and MTP requests (split when topk > 512) and a 40-token prefill (no split), over
  // caches shorter and longer than topk, and an empty one (only -1 / out-of-range entries).
  LatentCase m = make_latent_case(config(heads, bs), {1, 2, 40, 1}, {900, 100, 3000, 0}, 60 + heads + bs + topk);
  if (heads == 128) m = make_latent_case(config(heads, bs), {1, 2, 1}, {900, 100, 0}, 61 + bs + topk);
  for (bool with_len : {false, true}) {
    add_sparse(m, topk, kind, 70 + topk, with_len);
    m.use_sink = with_len;  // sinks on half the runs
    check_case(m);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, CpuLatentSparse,
    ::testing::Values(std::make_tuple(1, 64, LatentIndices::kPositions, 64),
                      std::make_tuple(16, 64, LatentIndices::kPositions, 200),
                      std::make_tuple(16, 1, LatentIndices::kPositions, 1100),
                      std::make_tuple(16, 64, LatentIndices::kSlots, 1100),
                      std::make_tuple(8, 1, LatentIndices::kSlots, 64),
                      std::make_tuple(128, 64, LatentIndices::kPositions, 600),
                      std::make_tuple(128, 16, LatentIndices::kSlots, 128)),
    [](const auto& i) {
      return "H" + std::to_string(std::get<0>(i.param)) + "_page" + std::to_string(std::get<1>(i.param)) +
             (std::get<2>(i.param) == LatentIndices::kPositions ? "_positions" : "_slots") + "_topk" +
             std::to_string(std::get<3>(i.param));
    });

TEST(CpuLatentSparseApi, QueryRowsPastThePlanAreIgnored) {
  LatentCase m = make_latent_case(config(16, 16), {1, 3}, {200, 50}, 80, true, /*extra_rows=*/3);
  add_sparse(m, 100, LatentIndices::kPositions, 81, true);
  check_case(m);
}

TEST(CpuLatentSparseApi, AllPositionsInOrderEqualDense) {
  // Decode tokens whose index rows list every position in order: the same keys, chunks and
  // splits as the dense plan, so the same bits.
  const std::vector<int32_t> kv = {1300, 64, 7};
  LatentCase dense = make_latent_case(config(16, 16), {1, 1, 1}, kv, 82);
  const int topk = 1300;
  LatentCase sparse = dense;
  sparse.opts.topk = topk;
  sparse.cfg.max_topk = topk;
  sparse.indices = HostTensor(DType::kInt32, {3, topk});
  for (int t = 0; t < 3; ++t)
    for (int e = 0; e < topk; ++e) sparse.indices.set(t * topk + e, e < kv[t] ? e : -1);
  const LatentResult a = run_latent(dense), b = run_latent(sparse);
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.lse, b.lse));
  EXPECT_TRUE(same_bits(a.max, b.max));
  // And through cache slots.
  for (int t = 0; t < 3; ++t)
    for (int e = 0; e < topk; ++e) sparse.indices.set(t * topk + e, e < kv[t] ? sparse.slot(t, e) : -1);
  sparse.opts.indices = LatentIndices::kSlots;
  const LatentResult c = run_latent(sparse);
  EXPECT_TRUE(same_bits(a.out, c.out));
}

TEST(CpuLatentSparseApi, PositionPlansOnADeviceBlockTable) {
  // Indices naming request positions go through the engine's table where it lives (the host's,
  // for a CPU object): the same bits as through the table plan() copies.
  LatentCase m = make_latent_case(config(16, 16), {1, 3, 2}, {700, 90, 300}, 86);
  add_sparse(m, 128, LatentIndices::kPositions, 87, true);
  const LatentResult host = run_latent(m);
  LatentBatch b = m.batch();
  b.device_block_table = b.block_table;
  b.block_table = nullptr;
  const LatentResult dev = run_latent(m, nullptr, false, &b);
  EXPECT_TRUE(same_bits(host.out, dev.out) && same_bits(host.lse, dev.lse) && same_bits(host.max, dev.max));
}

TEST(CpuLatentSparseApi, SlotPlansNeedNoTable) {
  // kSlots plans read neither kv_lens nor the block table.
  LatentCase m = make_latent_case(config(8, 64), {1, 2}, {300, 40}, 83);
  add_sparse(m, 64, LatentIndices::kSlots, 84, false);
  const LatentRef ref = latent_reference(m);
  LatentBatch b = m.batch();
  b.kv_lens = nullptr;
  b.block_table = nullptr;
  b.block_table_cols = 0;
  const LatentResult r = run_latent(m, nullptr, false, &b);
  EXPECT_EQ(r.info.total_kv, 0);
  expect_matches(r, m, ref);
}

TEST(CpuLatentSparseApi, InfoReportsThePlan) {
  // 16 heads, topk 1100: a decode token splits into 3 (one merge); the 40-token request does not.
  LatentCase m = make_latent_case(config(16, 64), {1, 40}, {2000, 2000}, 85);
  add_sparse(m, 1100, LatentIndices::kPositions, 86, false);
  const LatentResult r = run_latent(m);
  EXPECT_TRUE(r.info.sparse);
  EXPECT_EQ(r.info.topk, 1100);
  EXPECT_EQ(r.info.num_merges, 1);
  EXPECT_EQ(r.info.num_items, 3 + 40);
  EXPECT_EQ(r.info.partial_rows, 3 * 16);
  EXPECT_EQ(r.info.visible_pairs, 41 * 1100);
}

TEST(CpuLatentSparseApi, RepeatedRunsAndBatchInvariance) {
  LatentCase m = make_latent_case(config(16, 16), {1, 2, 1}, {900, 100, 600}, 87);
  add_sparse(m, 700, LatentIndices::kPositions, 88, true);
  LatentAttention attn(m.cfg);
  const LatentResult a = run_latent(m, &attn), b = run_latent(m, &attn);
  EXPECT_TRUE(same_bits(a.out, b.out) && same_bits(a.lse, b.lse));
  // The last request alone: the same bits as in the batch.
  LatentCase one = m;
  one.q_lens = {1};
  one.kv_lens = {600};
  one.block_table.assign(m.block_table.begin() + 2 * m.cols, m.block_table.begin() + 3 * m.cols);
  const int64_t H = 16, D = 576, topk = 700;
  one.q = HostTensor(DType::kBF16, {1, H, D});
  for (int64_t i = 0; i < H * D; ++i) one.q.set(i, m.q.get(3 * H * D + i));
  one.indices = HostTensor(DType::kInt32, {1, topk});
  for (int64_t e = 0; e < topk; ++e) one.indices.set(e, m.indices.get(3 * topk + e));
  one.topk_length = HostTensor(DType::kInt32, {1});
  one.topk_length.set(0, m.topk_length.get(3));
  const LatentResult alone = run_latent(one);
  EXPECT_EQ(token_rows(alone.out, 0, 1), token_rows(a.out, 3, 1));
  EXPECT_EQ(token_rows(alone.lse, 0, 1), token_rows(a.lse, 3, 1));
}

}  // namespace
}  // namespace test
}  // namespace mlakit
