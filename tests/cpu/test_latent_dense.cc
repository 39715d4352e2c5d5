// Dense latent attention on the CPU backend against the float64 reference: decode over ragged
// contexts (0-length and 1-token contexts, kv_len 0, contexts that split) at 1, 8, 16 and 128
// heads and page sizes 1, 16, 64, 256; MTP (2 and 4 new tokens) and extends (64, 128) causal
// among themselves; non-causal; q as one tensor or q_nope + q_pe; sinks; fp16. Then what the
// results must not depend on: repeated runs, the batch around a request, the thread count, the
// LSE's layout, upload_in_run; and re-planning the same object.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "alloc_count.h"
#include "mlakit/latent.h"
#include "util/latent_case.h"
#include "util/latent_check.h"

namespace mlakit {
namespace test {
namespace {

LatentConfig config(int heads, int block_size, DType dtype = DType::kBF16) {
  LatentConfig c;
  c.num_heads = heads;
  c.block_size = block_size;
  c.kv_split_size = 512;  // requests over 512 keys split (the CPU's default is 1024)
  c.dtype = dtype;
  return c;
}

void check_case(const LatentCase& m, bool lse_ht = false) {
  const LatentRef ref = latent_reference(m);
  const LatentResult r = run_latent(m, nullptr, lse_ht);
  expect_matches(r, m, ref, lse_ht);
}

class CpuLatentDecode : public ::testing::TestWithParam<std::tuple<int, int>> {};  // heads, page size

TEST_P(CpuLatentDecode, MatchesReference) {
  const auto [heads, bs] = GetParam();
  // kv_len 1 (no context: the token sees itself), 2 (a 1-token context), 0 (no key at all),
  // contexts that are not a multiple of the page and ones that split (> 512 keys).
  std::vector<int32_t> kv = {1, 2, 37, 0, 600, 1100};
  if (heads == 128) kv = {1, 2, 0, 600};
  const std::vector<int32_t> q(kv.size(), 1);
  const LatentCase m = make_latent_case(config(heads, bs), q, kv, 10 + heads + bs);
  check_case(m);
}

INSTANTIATE_TEST_SUITE_P(HeadsPages, CpuLatentDecode,
                         ::testing::Combine(::testing::Values(1, 8, 16, 128), ::testing::Values(1, 16, 64, 256)),
                         [](const auto& i) {
                           return "H" + std::to_string(std::get<0>(i.param)) + "_page" +
                                  std::to_string(std::get<1>(i.param));
                         });

TEST(CpuLatentDense, MtpCausal) {
  // 2 and 4 new tokens per request (causal among them, bottom-right), a request whose new tokens
  // are its whole cache, one that splits, one whose cache is shorter than its new tokens.
  for (int heads : {16, 128}) {
    const LatentCase m = make_latent_case(config(heads, 64), {2, 4, 4, 2, 3}, {2, 90, 700, 1, 4}, 30 + heads);
    check_case(m);
  }
}

TEST(CpuLatentDense, ExtendCausal) {
  // 64 and 128 new tokens over contexts 0, 1 and longer: many row blocks, no splits.
  LatentCase m = make_latent_case(config(8, 16), {64, 128, 64}, {64, 129, 800}, 41);
  check_case(m);
  const LatentResult r = run_latent(m);
  EXPECT_EQ(r.info.num_merges, 0);
  EXPECT_EQ(r.info.partial_rows, 0);
}

TEST(CpuLatentDense, NonCausal) {
  LatentCase m = make_latent_case(config(16, 16), {3, 1, 2}, {50, 700, 2}, 43);
  m.opts.causal = false;
  check_case(m);
}

TEST(CpuLatentDense, SmallDimsAndOddHeads) {
  LatentConfig c = config(5, 4);
  c.kv_lora_rank = 64;
  c.qk_rope_head_dim = 32;
  c.kv_split_size = 64;
  check_case(make_latent_case(c, {1, 3, 17}, {100, 3, 300}, 44));
  // A latent of 96 (6 column blocks of 16: the amx path's O tiles in a block of 4, then of 2)
  // and a rope of 96 (k-steps of 32 dims straddling no part), pages of 32.
  c.num_heads = 20;
  c.kv_lora_rank = 96;
  c.qk_rope_head_dim = 96;
  c.block_size = 32;
  check_case(make_latent_case(c, {2, 1, 5}, {77, 200, 5}, 47));
}

TEST(CpuLatentDense, SplitsCappedForLongContexts) {
  // kv_split_size 64: 3000 keys would be 47 splits; at most 32 are made, each 128 keys.
  LatentConfig c = config(4, 16);
  c.kv_split_size = 64;
  const LatentCase m = make_latent_case(c, {1, 2}, {3000, 2049}, 45);
  check_case(m);
  const LatentResult r = run_latent(m);
  EXPECT_GT(r.info.num_merges, 0);
  EXPECT_EQ(r.info.kv_split_size, 64);
}

TEST(CpuLatentDense, SplitQueryEqualsJointQuery) {
  // q_nope [T, H, L] + q_pe [T, H, R] against the same values as one [T, H, L + R] tensor.
  LatentCase split = make_latent_case(config(16, 64), {1, 2, 1}, {700, 30, 5}, 46, /*split_q=*/true);
  LatentCase joint = split;
  joint.split_q = false;
  const int64_t rows = split.q.shape()[0], H = 16, L = 512, R = 64;
  joint.q = HostTensor(DType::kBF16, {rows, H, L + R});
  for (int64_t i = 0; i < rows * H; ++i) {
    for (int64_t d = 0; d < L; ++d) joint.q.set(i * (L + R) + d, split.q.get(i * L + d));
    for (int64_t d = 0; d < R; ++d) joint.q.set(i * (L + R) + L + d, split.q_pe.get(i * R + d));
  }
  check_case(split);
  const LatentResult a = run_latent(split), b = run_latent(joint);
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.lse, b.lse));
}

TEST(CpuLatentDense, AttentionSink) {
  LatentCase m = make_latent_case(config(16, 16), {1, 2, 1, 1}, {40, 700, 0, 1}, 47);
  m.use_sink = true;
  check_case(m);
}

TEST(CpuLatentDense, Fp16) {
  // fp16 takes the fp32 products (tighter tolerance).
  const LatentCase m = make_latent_case(config(16, 64, DType::kFP16), {1, 4, 1}, {700, 60, 2}, 48, true);
  check_case(m);
  LatentAttention attn(m.cfg);
  EXPECT_STREQ(attn.info().cpu_isa, "fp32");
}

TEST(CpuLatentDense, LseLayouts) {
  // [T, H] and [H, T] memory hold the same values, bit for bit.
  const LatentCase m = make_latent_case(config(16, 16), {1, 3, 1}, {600, 20, 0}, 49, false, /*extra_rows=*/2);
  check_case(m, /*lse_ht=*/true);
  const LatentResult a = run_latent(m, nullptr, false), b = run_latent(m, nullptr, true);
  const int64_t T = m.total_q();
  EXPECT_EQ(rows_th(a.lse, T, 16, false), rows_th(b.lse, T, 16, true));
  EXPECT_EQ(rows_th(a.max, T, 16, false), rows_th(b.max, T, 16, true));
}

TEST(CpuLatentDense, CapacityBuffersKeepTheirTail) {
  // q and out hold more rows than the plan's tokens: the rest are never written (checked by
  // expect_matches), and a plan for fewer tokens leaves more of them untouched.
  const LatentCase m = make_latent_case(config(8, 16), {2, 1}, {50, 600}, 50, false, /*extra_rows=*/5);
  check_case(m);
}

TEST(CpuLatentDense, RepeatedRunsAreBitwiseEqual) {
  const LatentCase m = make_latent_case(config(16, 64), {1, 4, 64, 1}, {1500, 80, 200, 3}, 51);
  LatentAttention attn(m.cfg);
  const LatentResult a = run_latent(m, &attn), b = run_latent(m, &attn), c = run_latent(m);
  EXPECT_TRUE(same_bits(a.out, b.out) && same_bits(a.lse, b.lse) && same_bits(a.max, b.max));
  EXPECT_TRUE(same_bits(a.out, c.out) && same_bits(a.lse, c.lse));
}

TEST(CpuLatentDense, ThreadCountDoesNotChangeBits) {
  const LatentCase m = make_latent_case(config(16, 16), {1, 2, 64}, {1300, 500, 100}, 52);
  setenv("MLAKIT_CPU_THREADS", "1", 1);
  const LatentResult one = run_latent(m);
  unsetenv("MLAKIT_CPU_THREADS");
  const LatentResult all = run_latent(m);
  EXPECT_TRUE(same_bits(one.out, all.out) && same_bits(one.lse, all.lse) && same_bits(one.max, all.max));
}

TEST(CpuLatentDense, BatchInvariance) {
  // Each request alone gives the same bits as inside a batch with others around it: decode
  // that splits, MTP, an extend.
  const std::vector<int32_t> q = {1, 3, 1, 70, 2}, kv = {1800, 40, 520, 300, 2};
  const LatentCase batch = make_latent_case(config(16, 16), q, kv, 53);
  const LatentResult all = run_latent(batch);
  int64_t t0 = 0;
  for (size_t r = 0; r < q.size(); ++r) {
    // The same request alone: its q rows and its pages (the cache and table are shared).
    LatentCase one = batch;
    one.q_lens = {q[r]};
    one.kv_lens = {kv[r]};
    one.block_table.assign(batch.block_table.begin() + static_cast<std::ptrdiff_t>(r * batch.cols),
                           batch.block_table.begin() + static_cast<std::ptrdiff_t>((r + 1) * batch.cols));
    const int64_t rows = q[r], H = 16, D = 576;
    one.q = HostTensor(DType::kBF16, {rows, H, D});
    for (int64_t i = 0; i < rows * H * D; ++i) one.q.set(i, batch.q.get(t0 * H * D + i));
    const LatentResult alone = run_latent(one);
    EXPECT_EQ(token_rows(alone.out, 0, rows), token_rows(all.out, t0, rows)) << "request " << r;
    EXPECT_EQ(token_rows(alone.lse, 0, rows), token_rows(all.lse, t0, rows)) << "request " << r;
    t0 += rows;
  }
}

TEST(CpuLatentDense, DeviceBlockTableGivesTheSameBits) {
  // The engine's own table in the device's memory (the host's, for a CPU object), read by run()
  // through its row stride: the same bits as the table plan() copies; a wider
  // stride (a slice of a bigger table) too; re-planning on it keeps its bits.
  LatentCase m = make_latent_case(config(16, 16), {1, 3, 64, 1}, {900, 40, 130, 2}, 57);
  const LatentResult host = run_latent(m);
  LatentAttention attn(m.cfg);
  LatentBatch b = m.batch();
  b.device_block_table = b.block_table;
  b.block_table = nullptr;
  const LatentResult dev = run_latent(m, &attn, false, &b);
  EXPECT_TRUE(same_bits(host.out, dev.out) && same_bits(host.lse, dev.lse) && same_bits(host.max, dev.max));
  // A stride of cols + 5: the rows of a wider table.
  const int wide = m.cols + 5;
  std::vector<int32_t> table(m.q_lens.size() * static_cast<size_t>(wide), -7);
  for (size_t r = 0; r < m.q_lens.size(); ++r)
    for (int c = 0; c < m.cols; ++c) table[r * wide + c] = m.block_table[r * m.cols + c];
  b.device_block_table = table.data();
  b.block_table_cols = wide;
  const LatentResult strided = run_latent(m, &attn, false, &b);
  EXPECT_TRUE(same_bits(host.out, strided.out) && same_bits(host.lse, strided.lse));
  const LatentResult again = run_latent(m, &attn);  // back on a host table
  EXPECT_TRUE(same_bits(host.out, again.out));
}

TEST(CpuLatentDense, OutRowsAtAnyStride) {
  // out as a view of rows 516 elements apart (a slice of a wider buffer): the same bits as a
  // contiguous out, and the pad between the rows never written. Decode that splits, MTP and an
  // extend, causal.
  LatentCase m = make_latent_case(config(16, 16), {1, 4, 64}, {1300, 40, 100}, 58);
  m.opts.causal = true;
  const LatentResult dense = run_latent(m);
  LatentAttention attn(m.cfg);
  attn.plan(m.batch(), m.opts);
  const int64_t rows = m.q.shape()[0], H = m.cfg.num_heads, L = m.cfg.kv_lora_rank, stride = L + 4;
  HostTensor wide(m.cfg.dtype, {rows, H, stride}), lse(DType::kFP32, {rows, H});
  wide.fill_bytes(0xFF);
  lse.fill_bytes(0xFF);
  TensorView keep[5];
  const TensorView out(wide.data(), m.cfg.dtype, {rows, H, L}, {H * stride, stride, 1});
  TensorView lse_view = lse.view();
  attn.run(m.layer(keep), out, &lse_view);
  bool same = true, pad_kept = true;
  for (int64_t i = 0; i < rows * H; ++i) {
    for (int64_t c = 0; c < L; ++c) {
      const double a = dense.out.get(i * L + c), b = wide.get(i * stride + c);
      same = same && (a == b || (std::isnan(a) && std::isnan(b)));
    }
    for (int64_t c = L; c < stride; ++c) pad_kept = pad_kept && std::isnan(wide.get(i * stride + c));
  }
  EXPECT_TRUE(same);
  EXPECT_TRUE(pad_kept);
  EXPECT_TRUE(same_bits(dense.lse, lse));
}

TEST(CpuLatentDense, DeviceBlockTableIsOneOfTwo) {
  const LatentCase m = make_latent_case(config(16, 16), {1, 2}, {300, 20}, 58);
  LatentAttention attn(m.cfg);
  attn.plan(m.batch(), m.opts);
  LatentBatch both = m.batch();
  both.device_block_table = both.block_table;
  EXPECT_TRUE(throws_error([&] { attn.plan(both, m.opts); }, ErrorKind::kInvalidArgument, "block_table"));
  LatentBatch none = m.batch();
  none.block_table = nullptr;
  EXPECT_TRUE(throws_error([&] { attn.plan(none, m.opts); }, ErrorKind::kInvalidArgument, "block_table"));
  // Its columns are still checked against the lengths (its entries cannot be).
  LatentBatch narrow = m.batch();
  narrow.device_block_table = narrow.block_table;
  narrow.block_table = nullptr;
  narrow.block_table_cols = 1;
  EXPECT_TRUE(throws_error([&] { attn.plan(narrow, m.opts); }, ErrorKind::kInvalidArgument, "block_table"));
  EXPECT_TRUE(attn.planned());  // the first plan is still in force
}

TEST(CpuLatentDense, UploadInRunMatches) {
  LatentCase m = make_latent_case(config(16, 16), {1, 2}, {700, 30}, 54);
  const LatentResult a = run_latent(m);
  m.cfg.upload_in_run = true;
  const LatentResult b = run_latent(m);
  EXPECT_TRUE(same_bits(a.out, b.out) && same_bits(a.lse, b.lse));
}

TEST(CpuLatentDense, ReplanWithNewLengths) {
  // One object, three plans: each against the reference; the first plan again gives its bits.
  LatentCase a = make_latent_case(config(16, 16), {1, 1, 4}, {900, 20, 40}, 55);
  LatentCase b = make_latent_case(config(16, 16), {64, 1}, {70, 1}, 56);
  LatentConfig cap = a.cfg;
  cap.max_batch = 4;
  cap.max_q_tokens = 80;
  cap.max_kv_tokens = 2000;
  cap.num_blocks = std::max(a.cfg.num_blocks, b.cfg.num_blocks);
  a = make_latent_case(cap, a.q_lens, a.kv_lens, 55);
  b = make_latent_case(cap, b.q_lens, b.kv_lens, 56);
  LatentAttention attn(cap);
  const LatentResult a1 = run_latent(a, &attn);
  expect_matches(a1, a, latent_reference(a));
  const LatentResult b1 = run_latent(b, &attn);
  expect_matches(b1, b, latent_reference(b));
  const LatentResult a2 = run_latent(a, &attn);
  EXPECT_TRUE(same_bits(a1.out, a2.out) && same_bits(a1.lse, a2.lse));
}

TEST(CpuLatentDense, ReplanAllocatesNothing) {
  const LatentCase m = make_latent_case(config(16, 16), {1, 2, 1}, {900, 20, 40}, 57);
  LatentAttention attn(m.cfg);
  attn.plan(m.batch(), m.opts);  // first plan: scratch grown if it ever is
  AllocCounter count;
  attn.plan(m.batch(), m.opts);
  EXPECT_EQ(count.count(), 0);
}

TEST(CpuLatentDense, EmptyPlans) {
  // No request, and requests without new tokens: nothing to compute, nothing written.
  LatentCase m = make_latent_case(config(8, 16), {0, 0}, {30, 0}, 60, false, /*extra_rows=*/2);
  LatentResult r = run_latent(m);
  EXPECT_EQ(r.info.num_items, 0);
  expect_matches(r, m, latent_reference(m));
  LatentAttention attn(m.cfg);
  attn.plan(LatentBatch{}, m.opts);
  EXPECT_EQ(attn.info().total_q, 0);
  HostTensor q(DType::kBF16, {0, 8, 576}), out(DType::kBF16, {0, 8, 512});
  LatentLayer y;
  y.q = q.view();
  y.kv_cache = m.cache.view();
  EXPECT_NO_THROW(attn.run(y, out.view()));
}

TEST(CpuLatentDense, DefaultSplitSize) {
  LatentConfig c = config(16, 16);
  c.kv_split_size = 0;
  const LatentCase m = make_latent_case(c, {1}, {3000}, 59);
  const LatentResult r = run_latent(m);
  EXPECT_EQ(r.info.kv_split_size, 1024);
  EXPECT_EQ(r.info.partial_rows, 3 * 16);
  expect_matches(r, m, latent_reference(m));
}

TEST(CpuLatentDense, InfoReportsThePlan) {
  // A decode of 16 heads over 1100 keys splits into 3 ranges of 512 (one merge of 16 rows); an
  // extend does not split.
  const LatentCase m = make_latent_case(config(16, 16), {1, 64}, {1100, 64}, 58);
  const LatentResult r = run_latent(m);
  EXPECT_EQ(r.info.batch_size, 2);
  EXPECT_EQ(r.info.total_q, 65);
  EXPECT_EQ(r.info.total_kv, 1164);
  EXPECT_FALSE(r.info.sparse);
  EXPECT_EQ(r.info.block_rows, 64);
  EXPECT_EQ(r.info.kv_split_size, 512);
  EXPECT_EQ(r.info.num_merges, 1);
  EXPECT_EQ(r.info.partial_rows, 3 * 16);
  EXPECT_EQ(r.info.num_items, 3 + 64 * 16 / 64);
  EXPECT_EQ(r.info.visible_pairs, 1100 + 64 * 65 / 2);
}

}  // namespace
}  // namespace test
}  // namespace mlakit
