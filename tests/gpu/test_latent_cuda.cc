// LatentAttention on CUDA (the Hopper kernel) against the float64 reference, every output
// NaN-poisoned before each run and checked fully written: decode over ragged contexts (0, 1,
// odd, around one 64-key tile, several tiles, one long enough to split many times) at 1, 16 and
// 128 heads, every page size, bf16 and fp16; MTP and extends (2 to 129 new tokens, causal
// bottom-right and not) whose packed (token, head) rows span several 64-row blocks, odd head
// counts; q as one tensor or q_nope + q_pe; lse through an [H, T] view, max_logits, sinks,
// optional outputs left out; sparse plans (positions and slots, -1 padding, repeats, the first and
// last key, entries past the bound, topk_length 0, short, full and past topk; topk 37 to 2048).
// Blocks that run many items of every length in turn. Then what the bits must not depend on:
// kv_split_size's resolution, run after run, the batch around a request, re-planning one
// object; CUDA-graph replays after re-planning (the plan uploaded by plan() and by run()); and
// refusals: configs the kernel does not run, rejected run() and plan() calls that write nothing
// and leave the previous plan in force.
//
// Every test skips, saying why, where LatentAttention cannot run on CUDA (no GPU, a GPU other
// than sm90, a build without the Hopper kernel).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/latent_device_case.h"
#include "mlakit/latent.h"
#include "mlakit/runtime.h"
#include "util/latent_case.h"
#include "util/latent_check.h"
#include "util/test_util.h"

#if MLAKIT_WITH_CUDA
#include <cuda_runtime.h>

#include "gpu/captured_graph.h"
#endif

namespace mlakit {
namespace test {
namespace {

// The CUDA backend's default keys per split (LatentConfig::kv_split_size = 0).
constexpr int kCudaDefaultSplit = 512;

LatentConfig config(int heads, int block_size, DType dtype = DType::kBF16, int kv_split_size = 0) {
  LatentConfig c;
  c.num_heads = heads;
  c.block_size = block_size;
  c.dtype = dtype;
  c.kv_split_size = kv_split_size;
  return c;
}

std::string dtype_label(DType t) { return t == DType::kBF16 ? "bf16" : "fp16"; }

// The case on CUDA against its float64 reference.
LatentResult check_case(const LatentCase& m, const LatentCudaRun& how = {}) {
  const LatentRef ref = latent_reference(m);
  LatentResult r = run_latent_cuda(m, nullptr, how);
  expect_matches(r, m, ref, how.layout.lse_ht);
  return r;
}

bool all_poison(const HostTensor& t) {
  return std::all_of(t.bytes().begin(), t.bytes().end(), [](uint8_t b) { return b == 0xFF; });
}

// m's block table in device memory, as an engine holds it (LatentBatch::device_block_table):
// `cols` columns a row, those past m.cols -1 (a slice of a wider table).
DeviceTensor device_block_table(const LatentCase& m, int cols) {
  HostTensor table(DType::kInt32, {static_cast<int64_t>(m.q_lens.size()), cols});
  for (size_t r = 0; r < m.q_lens.size(); ++r)
    for (int c = 0; c < cols; ++c)
      table.set(static_cast<int64_t>(r) * cols + c, c < m.cols ? m.block_table[r * m.cols + c] : -1);
  return DeviceTensor(table, Device::cuda(0));
}

bool same_results(const LatentResult& a, const LatentResult& b) {
  return same_bits(a.out, b.out) && same_bits(a.lse, b.lse) && same_bits(a.max, b.max);
}

class CudaLatentTest : public ::testing::Test {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_NO_LATENT_CUDA(); }
};

template <class P>
class CudaLatentParamTest : public ::testing::TestWithParam<P> {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_NO_LATENT_CUDA(); }
};

// ---- dense ----------------------------------------------------------------------------------

// heads, page size, dtype
class CudaLatentDecode : public CudaLatentParamTest<std::tuple<int, int, DType>> {};

TEST_P(CudaLatentDecode, MatchesReference) {
  const auto [heads, bs, dtype] = GetParam();
  // kv_len 1 (the token sees itself), 2, 0 (no key at all: out 0, lse -inf), odd, around one
  // 64-key tile (63, 64, 65), past two tiles, and past the default split (700 > 512). Two q rows
  // past the plan's tokens must keep their poison.
  const std::vector<int32_t> kv = {1, 2, 0, 37, 63, 64, 65, 129, 200, 700};
  const std::vector<int32_t> q(kv.size(), 1);
  const bool split_q = bs == 16 || bs == 256;  // q_nope + q_pe on some page sizes
  const LatentCase m =
      make_latent_case(config(heads, bs, dtype), q, kv, 100 + heads * 7 + bs + (dtype == DType::kFP16 ? 1 : 0),
                       split_q, /*extra_rows=*/2);
  check_case(m);
}

INSTANTIATE_TEST_SUITE_P(HeadsPagesDtypes, CudaLatentDecode,
                         ::testing::Combine(::testing::Values(1, 16, 128), ::testing::Values(1, 8, 16, 64, 256),
                                            ::testing::Values(DType::kBF16, DType::kFP16)),
                         [](const auto& i) {
                           return "H" + std::to_string(std::get<0>(i.param)) + "_page" +
                                  std::to_string(std::get<1>(i.param)) + "_" + dtype_label(std::get<2>(i.param));
                         });

TEST_F(CudaLatentTest, LongDecodeSplitsAndMerges) {
  // The one long context (4100 keys: 9 splits of the default 512) beside a 1-key one and one of
  // 2100; at 16 heads and at 128 (a decode token's 128 heads are two 64-row blocks).
  for (int heads : {16, 128}) {
    SCOPED_TRACE("heads " + std::to_string(heads));
    const LatentCase m = make_latent_case(config(heads, 64), {1, 1, 1}, {4100, 1, 2100}, 200 + heads);
    const LatentResult r = check_case(m);
    EXPECT_EQ(r.info.kv_split_size, kCudaDefaultSplit);
    EXPECT_GE(r.info.num_merges, 2) << "both long requests split";
    EXPECT_GT(r.info.partial_rows, 0);
  }
}

// heads, causal
class CudaLatentMtp : public CudaLatentParamTest<std::tuple<int, bool>> {};

TEST_P(CudaLatentMtp, MatchesReference) {
  const auto [heads, causal] = GetParam();
  // 2, 4 and 7 new tokens (MTP), 64 and 129 (extends), a request with none and a decode. The
  // 2-token request's cache is exactly its new tokens; the 7-token one has a cache of 5, so with
  // `causal` its first two rows see no key. At 16 heads a 64-row block holds 4 tokens; at 128
  // each token spans two blocks.
  const std::vector<int32_t> q = {2, 4, 7, 64, 129, 0, 1};
  const std::vector<int32_t> kv = {2, 300, 5, 164, 200, 10, 900};
  LatentCase m = make_latent_case(config(heads, 64), q, kv, 300 + heads + (causal ? 1 : 0), false, /*extra_rows=*/3);
  m.opts.causal = causal;
  m.opts.sm_scale = 0.0722f;  // DeepSeek's qk_head_dim^-0.5 (192), not the default
  check_case(m);
}

INSTANTIATE_TEST_SUITE_P(HeadsCausal, CudaLatentMtp,
                         ::testing::Combine(::testing::Values(16, 128), ::testing::Bool()), [](const auto& i) {
                           return "H" + std::to_string(std::get<0>(i.param)) +
                                  (std::get<1>(i.param) ? "_causal" : "_noncausal");
                         });

// page size, dtype
class CudaLatentExtendPages : public CudaLatentParamTest<std::tuple<int, DType>> {};

TEST_P(CudaLatentExtendPages, MatchesReference) {
  // MTP and an extend through the smallest and largest pages and one in between (shuffled
  // blocks), with q split in two.
  const auto [bs, dtype] = GetParam();
  const LatentCase m = make_latent_case(config(16, bs, dtype), {3, 64, 1, 5}, {3, 500, 257, 70},
                                        400 + bs + (dtype == DType::kFP16 ? 1 : 0), /*split_q=*/true);
  check_case(m);
}

INSTANTIATE_TEST_SUITE_P(PagesDtypes, CudaLatentExtendPages,
                         ::testing::Combine(::testing::Values(1, 8, 256),
                                            ::testing::Values(DType::kBF16, DType::kFP16)),
                         [](const auto& i) {
                           return "page" + std::to_string(std::get<0>(i.param)) + "_" +
                                  dtype_label(std::get<1>(i.param));
                         });

TEST_F(CudaLatentTest, OddHeadCountsCrossRowBlocks) {
  // Head counts that do not divide 64: a block of packed rows ends inside a token (5 heads x 13
  // tokens = 65 rows), and decode tokens of 20 and 100 heads.
  check_case(make_latent_case(config(5, 16), {13, 1, 3}, {40, 600, 3}, 501));
  check_case(make_latent_case(config(20, 16), {1, 7, 1}, {100, 7, 1300}, 502));
  check_case(make_latent_case(config(100, 64), {1, 2}, {800, 66}, 503, /*split_q=*/true));
}

TEST_F(CudaLatentTest, SplitQueryEqualsJointQuery) {
  // q_nope [T, H, L] + q_pe [T, H, R] against the same values as one [T, H, L + R] tensor: the
  // same result, bit for bit, in both dtypes.
  for (DType dtype : {DType::kBF16, DType::kFP16}) {
    SCOPED_TRACE(dtype_label(dtype));
    const LatentCase split =
        make_latent_case(config(16, 64, dtype), {1, 2, 1, 64}, {700, 30, 5, 100}, 510, /*split_q=*/true);
    LatentCase joint = split;
    joint.split_q = false;
    const int64_t rows = split.q.shape()[0], H = 16, L = 512, R = 64;
    joint.q = HostTensor(dtype, {rows, H, L + R});
    for (int64_t i = 0; i < rows * H; ++i) {
      for (int64_t d = 0; d < L; ++d) joint.q.set(i * (L + R) + d, split.q.get(i * L + d));
      for (int64_t d = 0; d < R; ++d) joint.q.set(i * (L + R) + L + d, split.q_pe.get(i * R + d));
    }
    const LatentResult a = check_case(split), b = run_latent_cuda(joint);
    EXPECT_TRUE(same_results(a, b));
  }
}

TEST_F(CudaLatentTest, LseThroughTransposedViewAndMaxLogits) {
  // lse and max_logits as [H, T'] buffers read through [T', H] views (FlashAttention's layout):
  // the same values, bit for bit, as contiguous [T', H] ones; decode that splits (the merge writes
  // them) and an extend that does not.
  const LatentCase m = make_latent_case(config(16, 16), {1, 3, 1, 64}, {1200, 20, 0, 64}, 520, false, /*extra_rows=*/2);
  LatentCudaRun ht;
  ht.layout.lse_ht = true;
  const LatentResult a = check_case(m), b = check_case(m, ht);
  const int64_t T = m.total_q(), H = 16;
  EXPECT_EQ(rows_th(a.lse, T, H, false), rows_th(b.lse, T, H, true));
  EXPECT_EQ(rows_th(a.max, T, H, false), rows_th(b.max, T, H, true));
  EXPECT_TRUE(same_bits(a.out, b.out));
  // Past the plan's tokens the [H, T'] buffers keep their poison too.
  const std::vector<double> lse_all = rows_th(b.lse, m.q.shape()[0], H, true);
  const std::vector<double> max_all = rows_th(b.max, m.q.shape()[0], H, true);
  for (size_t i = static_cast<size_t>(T * H); i < lse_all.size(); ++i) {
    EXPECT_TRUE(std::isnan(lse_all[i]) && std::isnan(max_all[i])) << "written past the plan's tokens: " << i;
  }
}

TEST_F(CudaLatentTest, OutRowsAtAnyStride) {
  // out as a view of rows wider than 512 (a slice of a wider buffer): 520 (bf16) and 528 (fp16)
  // elements apart, rows the kernel stages in shared memory and writes as whole runs. Decode on
  // whole TMA tiles, a decode that splits (its rows through the merge), MTP and an extend, causal.
  // The pad is never written. Rows 516 elements apart do not start on 16 bytes: the CUDA backend
  // rejects them (docs/latent-attention.md) and writes nothing.
  const std::pair<int64_t, DType> layouts[] = {{520, DType::kBF16}, {528, DType::kFP16}, {516, DType::kBF16}};
  for (const auto& [stride, dtype] : layouts) {
    SCOPED_TRACE("out rows " + std::to_string(stride) + " elements apart, " + dtype_label(dtype));
    LatentCase m = make_latent_case(config(128, 64, dtype), {1, 4, 1, 64}, {300, 700, 3000, 200},
                                    560 + static_cast<uint64_t>(stride));
    m.opts.causal = true;
    LatentAttention attn(on_cuda(m.cfg));
    attn.plan(m.batch(), m.opts);
    LatentDeviceLayout layout;
    layout.out_head_stride = stride;
    const LatentDeviceLayer d(m, attn.config().device, layout);
    if (stride * static_cast<int64_t>(dtype_size(dtype)) % 16 != 0) {
      EXPECT_THROW(d.run(attn), Error);
      const LatentResult r = d.fetch(attn.info());
      EXPECT_TRUE(all_poison(r.out) && all_poison(r.lse) && all_poison(r.max)) << "a rejected run writes nothing";
      EXPECT_TRUE(d.out_pad_poisoned());
      continue;
    }
    d.run(attn);
    const LatentResult r = d.fetch(attn.info());
    expect_matches(r, m, latent_reference(m));
    EXPECT_TRUE(d.out_pad_poisoned());
  }
}

TEST_F(CudaLatentTest, AttentionSink) {
  // Sinks on decode (split and not), MTP and an extend, and on rows with no key (still 0).
  LatentCase m = make_latent_case(config(16, 16), {1, 2, 1, 1, 64}, {40, 700, 0, 1, 64}, 530);
  m.use_sink = true;
  check_case(m);
  LatentCase big = make_latent_case(config(128, 64, DType::kFP16), {1, 4}, {1100, 9}, 531, /*split_q=*/true);
  big.use_sink = true;
  check_case(big);
}

TEST_F(CudaLatentTest, OptionalOutputsLeftOut) {
  // No lse, no max_logits, or neither: out is still right (the merges need the split's lse
  // internally, not the caller's buffer), and the buffers not passed are never written.
  LatentCase m = make_latent_case(config(16, 64), {1, 4, 1}, {1500, 60, 3}, 540);
  m.use_sink = true;
  const LatentRef ref = latent_reference(m);
  for (int mask = 0; mask < 3; ++mask) {
    LatentCudaRun how;
    how.with_lse = mask == 1;
    how.with_max_logits = mask == 2;
    SCOPED_TRACE(std::string("lse ") + (how.with_lse ? "given" : "left out") + ", max_logits " +
                 (how.with_max_logits ? "given" : "left out"));
    LatentResult r = run_latent_cuda(m, nullptr, how);
    if (!how.with_lse) {
      EXPECT_TRUE(all_poison(r.lse));
    }
    if (!how.with_max_logits) {
      EXPECT_TRUE(all_poison(r.max));
    }
    take_reference_scalars(r, ref, m.total_q(), !how.with_lse, !how.with_max_logits);
    expect_matches(r, m, ref);
  }
}

TEST_F(CudaLatentTest, EmptyPlansWriteNothing) {
  // Requests without new tokens (one with a cache, one without), and a plan of no request: nothing
  // to compute, every row of the buffers keeps its poison.
  const LatentCase m = make_latent_case(config(16, 16), {0, 0}, {30, 0}, 550, false, /*extra_rows=*/2);
  const LatentResult r = run_latent_cuda(m);
  EXPECT_EQ(r.info.num_items, 0);
  EXPECT_TRUE(all_poison(r.out) && all_poison(r.lse) && all_poison(r.max));
  LatentAttention attn(on_cuda(m.cfg));
  const LatentBatch none{};
  const LatentResult e = run_latent_cuda(m, &attn, LatentCudaRun{{}, &none});
  EXPECT_EQ(e.info.total_q, 0);
  EXPECT_TRUE(all_poison(e.out) && all_poison(e.lse) && all_poison(e.max));
}

// ---- sparse ---------------------------------------------------------------------------------

struct SparseParam {
  int heads, block_size;
  LatentIndices kind;
  int topk;
  int64_t index_row_stride;  // 0: contiguous index rows
};

class CudaLatentSparse : public CudaLatentParamTest<SparseParam> {};

TEST_P(CudaLatentSparse, MatchesReference) {
  const SparseParam p = GetParam();
  // Decode and MTP tokens (their entries split past 512) and a 40-token prefill, over caches
  // shorter and longer than topk and an empty one (only -1 and out-of-range entries); at 128
  // heads fewer tokens. Two q rows past the plan's tokens.
  const bool big = p.heads == 128;
  const std::vector<int32_t> q = big ? std::vector<int32_t>{1, 2, 1, 4} : std::vector<int32_t>{1, 2, 40, 1, 3};
  const std::vector<int32_t> kv = big ? std::vector<int32_t>{900, 100, 0, 2500}
                                      : std::vector<int32_t>{900, 100, 3000, 0, 2100};
  LatentCase m = make_latent_case(config(p.heads, p.block_size), q, kv, 600 + p.heads + p.block_size + p.topk,
                                  /*split_q=*/p.topk % 2 == 0, /*extra_rows=*/2);
  LatentCudaRun how;
  how.layout.index_row_stride = p.index_row_stride;
  for (bool with_len : {false, true}) {
    SCOPED_TRACE(with_len ? "with topk_length" : "without topk_length");
    add_sparse(m, p.topk, p.kind, 700 + p.topk, with_len);
    if (with_len) {
      // Past topk (the whole row) and negative (none): clamped to [0, topk].
      m.topk_length.set(1, p.topk + 7);
      m.topk_length.set(2, -3);
    }
    m.use_sink = with_len;  // sinks on half the runs
    check_case(m, how);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, CudaLatentSparse,
    ::testing::Values(SparseParam{16, 64, LatentIndices::kPositions, 64, 0},
                      SparseParam{16, 64, LatentIndices::kSlots, 2048, 0},
                      SparseParam{128, 16, LatentIndices::kPositions, 2048, 0},
                      SparseParam{128, 64, LatentIndices::kSlots, 200, 0},
                      SparseParam{16, 1, LatentIndices::kPositions, 200, 0},
                      SparseParam{1, 256, LatentIndices::kPositions, 64, 0},
                      SparseParam{16, 8, LatentIndices::kSlots, 600, 0},
                      // An odd topk: its int32 rows are not 16-byte steps, so they are padded to 40.
                      SparseParam{16, 16, LatentIndices::kPositions, 37, 40},
                      SparseParam{128, 64, LatentIndices::kSlots, 37, 40}),
    [](const auto& i) {
      const SparseParam& p = i.param;
      return "H" + std::to_string(p.heads) + "_page" + std::to_string(p.block_size) +
             (p.kind == LatentIndices::kPositions ? "_positions" : "_slots") + "_topk" + std::to_string(p.topk) +
             (p.index_row_stride ? "_stride" + std::to_string(p.index_row_stride) : "");
    });

TEST_F(CudaLatentTest, SparseSlotPlansNeedNoTable) {
  // kSlots plans read neither kv_lens nor the block table.
  LatentCase m = make_latent_case(config(16, 64), {1, 2, 1}, {300, 40, 2000}, 620);
  add_sparse(m, 512, LatentIndices::kSlots, 621, true);
  const LatentRef ref = latent_reference(m);
  LatentBatch b = m.batch();
  b.kv_lens = nullptr;
  b.block_table = nullptr;
  b.block_table_cols = 0;
  const LatentResult r = run_latent_cuda(m, nullptr, LatentCudaRun{{}, &b});
  EXPECT_EQ(r.info.total_kv, 0);
  expect_matches(r, m, ref);
}

TEST_F(CudaLatentTest, SparseAllPositionsEqualDense) {
  // Decode tokens whose index rows list every position in order: the same keys in the same
  // order as the dense plan. Not necessarily the same bits (the two paths may tile differently),
  // but both match the reference.
  const std::vector<int32_t> kv = {1300, 64, 7};
  const LatentCase dense = make_latent_case(config(16, 16), {1, 1, 1}, kv, 630);
  const int topk = 1300;
  LatentCase sparse = dense;
  sparse.opts.topk = topk;
  sparse.cfg.max_topk = topk;
  sparse.indices = HostTensor(DType::kInt32, {3, topk});
  for (int t = 0; t < 3; ++t)
    for (int e = 0; e < topk; ++e) sparse.indices.set(t * topk + e, e < kv[t] ? e : -1);
  const LatentResult a = check_case(dense), b = check_case(sparse);
  std::vector<double> oa = a.out.to_doubles(), ob = b.out.to_doubles();
  EXPECT_LE(relative_error(ob, oa), 1e-2);
}

// ---- splits, repeatability, batch invariance, re-planning ----------------------------------

class CudaLatentSplitSize : public CudaLatentParamTest<int> {};

TEST_P(CudaLatentSplitSize, MatchesReference) {
  // kv_split_size 64 (many splits), 1024, and 0 (the backend's 512), dense and sparse. With
  // batch_invariant the plan splits by exactly that size; without it the planner may widen the
  // split by a power of two (its cost model: tests/cpu/test_latent_schedule.cc), never narrow it.
  const int split = GetParam();
  const int asked = split ? split : kCudaDefaultSplit;
  LatentCase m = make_latent_case(config(16, 16, DType::kBF16, split), {1, 2, 1, 4}, {3000, 700, 64, 1500},
                                  640 + split);
  m.opts.batch_invariant = true;
  const LatentResult r = check_case(m);
  EXPECT_EQ(r.info.kv_split_size, asked);
  EXPECT_GT(r.info.num_merges, 0);
  m.opts.batch_invariant = false;
  const LatentResult w = check_case(m);
  EXPECT_GE(w.info.kv_split_size, asked);
  EXPECT_EQ(w.info.kv_split_size % asked, 0);
  EXPECT_EQ(w.info.kv_split_size & (w.info.kv_split_size - 1), 0) << "a power of two";
  add_sparse(m, 2048, LatentIndices::kPositions, 641 + split, true);
  m.opts.batch_invariant = true;
  const LatentResult s = check_case(m);
  EXPECT_EQ(s.info.kv_split_size, asked);
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaLatentSplitSize, ::testing::Values(0, 64, 1024),
                         [](const auto& i) { return "split" + std::to_string(i.param); });

TEST_F(CudaLatentTest, RepeatedRunsAreBitwiseEqual) {
  // One object run after run, with another plan between, and a fresh object: the same bits.
  LatentCase m = make_latent_case(config(16, 64), {1, 4, 64, 1, 129}, {1500, 80, 200, 3, 129}, 650);
  LatentCase other = make_latent_case(config(16, 64), {2, 1}, {90, 1000}, 651);
  LatentConfig cap = m.cfg;
  cap.num_blocks = std::max(m.cfg.num_blocks, other.cfg.num_blocks);
  cap.max_topk = 700;
  m = make_latent_case(cap, m.q_lens, m.kv_lens, 650);
  other = make_latent_case(cap, other.q_lens, other.kv_lens, 651);
  LatentAttention attn(on_cuda(cap));
  const LatentResult a = run_latent_cuda(m, &attn), b = run_latent_cuda(m, &attn);
  run_latent_cuda(other, &attn);
  const LatentResult c = run_latent_cuda(m, &attn), d = run_latent_cuda(m);
  EXPECT_TRUE(same_results(a, b));
  EXPECT_TRUE(same_results(a, c));
  EXPECT_TRUE(same_results(a, d));
  expect_matches(a, m, latent_reference(m));
  // Sparse likewise.
  add_sparse(m, 700, LatentIndices::kPositions, 652, true);
  const LatentResult s1 = run_latent_cuda(m, &attn), s2 = run_latent_cuda(m, &attn), s3 = run_latent_cuda(m);
  EXPECT_TRUE(same_results(s1, s2));
  EXPECT_TRUE(same_results(s1, s3));
}

TEST_F(CudaLatentTest, DeviceBlockTableGivesTheSameBits) {
  // The engine's block table in device memory (LatentBatch::device_block_table), read by run():
  // the same bits as the host table plan() copies, with the table's rows at a wider stride too
  // (a slice of a bigger table), and sparse position plans alike.
  LatentCase m = make_latent_case(config(16, 16), {1, 3, 64, 1, 2}, {900, 40, 130, 2, 2000}, 660);
  const LatentResult host = run_latent_cuda(m);
  const int wide = m.cols + 3;
  const DeviceTensor dtable = device_block_table(m, wide);
  LatentBatch b = m.batch();
  b.block_table = nullptr;
  b.device_block_table = static_cast<const int32_t*>(dtable.view().data);
  b.block_table_cols = wide;
  LatentAttention attn(on_cuda(m.cfg));
  LatentCudaRun how;
  how.batch = &b;
  const LatentResult dev = run_latent_cuda(m, &attn, how);
  EXPECT_TRUE(same_results(host, dev));
  expect_matches(dev, m, latent_reference(m));
  // Sparse, indices naming request positions: the pages come from the device table too.
  m.cfg.max_topk = 256;
  add_sparse(m, 256, LatentIndices::kPositions, 661, true);
  const LatentResult shost = run_latent_cuda(m);
  LatentAttention sattn(on_cuda(m.cfg));
  const LatentResult sdev = run_latent_cuda(m, &sattn, how);
  EXPECT_TRUE(same_results(shost, sdev));
}

TEST_F(CudaLatentTest, BlocksRunManyItemsOfEveryLength) {
  // More than two items an SM, so each persistent block runs several in turn: items of no tile,
  // one, two and many mixed in the plan's order. Dense at 128 heads (a token's rows are two
  // items) over a host and a device block table; sparse at 16 heads (an item a token) by
  // positions with topk_length and by slots, over twice the requests.
  int sms = 0;  // the kernel's grid: one block an SM
#if MLAKIT_WITH_CUDA
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
#endif
  const int32_t lens[] = {0, 1, 63, 64, 65, 128, 129, 300, 700};
  std::vector<int32_t> q, kv;
  for (int i = 0; i < 96; ++i) {
    q.push_back(1 + i % 3);
    kv.push_back(lens[(i * 5) % 9]);
  }
  LatentCase m = make_latent_case(config(128, 64), q, kv, 680, /*split_q=*/false, /*extra_rows=*/2);
  m.opts.causal = true;
  const LatentResult host = check_case(m);
  EXPECT_GE(host.info.num_items, 2 * sms) << "blocks run several items";
  const DeviceTensor dtable = device_block_table(m, m.cols);
  LatentBatch b = m.batch();
  b.block_table = nullptr;
  b.device_block_table = static_cast<const int32_t*>(dtable.view().data);
  LatentCudaRun how;
  how.batch = &b;
  EXPECT_TRUE(same_results(host, run_latent_cuda(m, nullptr, how))) << "device block table";

  std::vector<int32_t> q2 = q, kv2 = kv;
  q2.insert(q2.end(), q.begin(), q.end());
  kv2.insert(kv2.end(), kv.rbegin(), kv.rend());
  LatentCase s = make_latent_case(config(16, 64), q2, kv2, 681, /*split_q=*/true, /*extra_rows=*/2);
  for (LatentIndices kind : {LatentIndices::kPositions, LatentIndices::kSlots}) {
    SCOPED_TRACE(kind == LatentIndices::kPositions ? "sparse positions" : "sparse slots");
    add_sparse(s, 600, kind, 682, /*with_topk_length=*/true);
    // Every length from none to the whole row, so items of 0, 1, 2 and more tiles alternate.
    for (int64_t t = 0; t < s.topk_length.numel(); ++t) s.topk_length.set(t, static_cast<double>((t * 37) % 640));
    const LatentResult r = check_case(s);
    EXPECT_GE(r.info.num_items, 2 * sms) << "blocks run several items";
  }
}

class CudaLatentBatchInvariance : public CudaLatentParamTest<int> {};  // heads

TEST_P(CudaLatentBatchInvariance, RequestAloneEqualsRequestInBatch) {
  // With batch_invariant, each request alone gives the bits it gets inside the batch: decodes
  // that split, MTP, an extend, a 2-token request over its own tokens, one with no new token;
  // then sparse.
  const int heads = GetParam();
  const std::vector<int32_t> q = {1, 3, 1, 70, 2, 0, 1}, kv = {1800, 40, 520, 300, 2, 5, 3000};
  LatentCase batch = make_latent_case(config(heads, 16), q, kv, 660 + heads);
  batch.opts.batch_invariant = true;
  for (int sparse = 0; sparse < 2; ++sparse) {
    SCOPED_TRACE(sparse ? "sparse" : "dense");
    if (sparse) add_sparse(batch, 700, LatentIndices::kPositions, 661 + heads, true);
    const LatentResult all = run_latent_cuda(batch);
    int64_t t0 = 0;
    for (size_t r = 0; r < q.size(); ++r) {
      SCOPED_TRACE("request " + std::to_string(r));
      if (q[r] == 0) continue;  // in the batch only: a case of no q row has nothing to compare
      const LatentCase one = single_request(batch, r);
      const LatentResult alone = run_latent_cuda(one);
      EXPECT_EQ(token_rows(alone.out, 0, q[r]), token_rows(all.out, t0, q[r]));
      EXPECT_EQ(token_rows(alone.lse, 0, q[r]), token_rows(all.lse, t0, q[r]));
      EXPECT_EQ(token_rows(alone.max, 0, q[r]), token_rows(all.max, t0, q[r]));
      t0 += q[r];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, CudaLatentBatchInvariance, ::testing::Values(16, 128),
                         [](const auto& i) { return "H" + std::to_string(i.param); });

TEST_F(CudaLatentTest, ReplanDenseSparseDense) {
  // One object: a dense plan, a sparse one, the dense one again (its bits again), each against
  // the reference; upload_in_run as well.
  for (bool upload_in_run : {false, true}) {
    SCOPED_TRACE(upload_in_run ? "upload_in_run" : "upload in plan");
    LatentConfig cap = config(16, 64);
    cap.max_batch = 4;
    cap.max_q_tokens = 80;
    cap.max_kv_tokens = 4000;
    cap.max_topk = 256;
    cap.num_blocks = 70;
    cap.upload_in_run = upload_in_run;
    const LatentCase a = make_latent_case(cap, {1, 1, 4}, {900, 20, 40}, 670);
    LatentCase b = make_latent_case(cap, {64, 1}, {70, 2000}, 671);
    add_sparse(b, 256, LatentIndices::kPositions, 672, true);
    LatentAttention attn(on_cuda(cap));
    const LatentResult a1 = run_latent_cuda(a, &attn);
    expect_matches(a1, a, latent_reference(a));
    const LatentResult b1 = run_latent_cuda(b, &attn);
    expect_matches(b1, b, latent_reference(b));
    const LatentResult a2 = run_latent_cuda(a, &attn);
    EXPECT_TRUE(same_results(a1, a2));
  }
}

// ---- CUDA graphs ----------------------------------------------------------------------------

struct GraphStep {
  std::vector<int32_t> q, kv;
};

// One run() captured once into a CUDA graph on a non-blocking stream, under another plan than any
// replay's; then per step: the step's inputs into the captured buffers, the outputs poisoned, a
// re-plan, one replay, checked against the reference, and an eager run() under the same plan
// giving the same bits. topk > 0: sparse plans (kPositions, so the re-plan's block table matters).
void replay_after_replanning(bool upload_in_run, int heads, int topk, const std::vector<GraphStep>& steps,
                             uint64_t seed) {
#if MLAKIT_WITH_CUDA
  LatentConfig cap = config(heads, 16);
  cap.upload_in_run = upload_in_run;
  cap.max_batch = 8;
  cap.max_q_tokens = 160;
  cap.max_kv_tokens = 4096;
  cap.max_topk = topk;
  cap.num_blocks = 260;
  std::vector<LatentCase> cases;
  for (size_t s = 0; s < steps.size(); ++s) {
    const int64_t tq = std::accumulate(steps[s].q.begin(), steps[s].q.end(), int64_t{0});
    // q rows at the capacity: every step's tensors have the captured shapes and addresses.
    cases.push_back(make_latent_case(cap, steps[s].q, steps[s].kv, seed + s, false,
                                     static_cast<int>(cap.max_q_tokens - tq)));
    if (topk > 0) add_sparse(cases.back(), topk, LatentIndices::kPositions, seed + 100 + s, true);
  }
  const Device dev = Device::cuda(0);
  LatentAttention attn(on_cuda(cap));
  const LatentDeviceLayer d(cases[0], dev);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const Stream st = stream;

  // One-time kernel setup outside the capture, then the capture, both under the last step's plan.
  attn.plan(cases.back().batch(), cases.back().opts, st);
  d.run(attn, st);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  CapturedGraph graph;
  ASSERT_TRUE(graph.capture(stream, [&] { d.run(attn, st); }));

  for (size_t s = 0; s < cases.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const LatentCase& m = cases[s];
    d.load(m, st);
    d.poison_outputs(st);
    attn.plan(m.batch(), m.opts, st);
    ASSERT_EQ(graph.launch(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const LatentResult replayed = d.fetch(attn.info());
    expect_matches(replayed, m, latent_reference(m));
    d.poison_outputs(st);
    d.run(attn, st);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_TRUE(same_results(replayed, d.fetch(attn.info()))) << "replay and eager run differ";
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaStreamDestroy(stream);
#else
  (void)upload_in_run, (void)heads, (void)topk, (void)steps, (void)seed;
#endif
}

// The plan uploaded by plan() (false) or by the captured run(), as the graph's first node (true).
class CudaLatentGraph : public CudaLatentParamTest<bool> {};

TEST_P(CudaLatentGraph, DenseReplayAfterReplanning) {
  // Decode, MTP and an extend of 129 tokens; more and fewer requests than the captured plan,
  // contexts that split and ones that do not.
  replay_after_replanning(GetParam(), 16, 0,
                          {{{1, 1, 4, 1}, {700, 1, 30, 0}},
                           {{129, 2}, {400, 2}},
                           {{1, 7, 1, 64, 1, 1}, {1500, 70, 64, 65, 3, 600}}},
                          680);
}

TEST_P(CudaLatentGraph, SparseReplayAfterReplanning) {
  // 128 heads, topk 256 by request position: new lengths, tables and indices per step.
  replay_after_replanning(GetParam(), 128, 256,
                          {{{1, 2, 1}, {900, 100, 0}},
                           {{4, 1}, {2000, 256}},
                           {{1, 1, 1, 1, 1}, {1, 300, 64, 65, 1000}}},
                          690);
}

INSTANTIATE_TEST_SUITE_P(Upload, CudaLatentGraph, ::testing::Bool(), [](const ::testing::TestParamInfo<bool>& i) {
  return std::string(i.param ? "upload_in_run" : "upload_in_plan");
});

// ---- refusals -------------------------------------------------------------------------------

TEST_F(CudaLatentTest, UnsupportedConfigsAreRefused) {
  // The kernel runs kv_lora_rank 512 with qk_rope_head_dim 64, on the 16-bit or FP8 caches
  // (test_latent_cuda_fp8.cc).
  LatentConfig c = config(16, 64);
  c.num_blocks = 4;
  c.max_batch = 1;
  c.max_q_tokens = 1;
  c.max_kv_tokens = 64;
  c = on_cuda(c);
  LatentConfig narrow = c;
  narrow.kv_lora_rank = 256;
  EXPECT_TRUE(throws_error([&] { LatentAttention a(narrow); }, ErrorKind::kUnsupported, "config.kv_lora_rank"));
  EXPECT_TRUE(throws_error([&] { LatentAttention::workspace_sizes(narrow); }, ErrorKind::kUnsupported,
                           "config.kv_lora_rank"));
  // Another rope width: refused as unsupported, naming one of the two widths.
  LatentConfig rope = c;
  rope.qk_rope_head_dim = 128;
  try {
    LatentAttention a(rope);
    ADD_FAILURE() << "qk_rope_head_dim 128 was accepted on CUDA";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    EXPECT_TRUE(e.argument() == "config.kv_lora_rank" || e.argument() == "config.qk_rope_head_dim") << e.what();
  }
  // The FP8 caches are read with bf16 only.
  LatentConfig fp8 = c;
  fp8.kv_cache_dtype = KvCacheDtype::kFp8;
  fp8.dtype = DType::kFP16;
  EXPECT_TRUE(throws_error([&] { LatentAttention a(fp8); }, ErrorKind::kInvalidArgument, "config.kv_cache_dtype"));
}

TEST_F(CudaLatentTest, RejectedCallsWriteNothing) {
  const LatentCase m = make_latent_case(config(16, 16), {1, 3}, {300, 40}, 700, false, /*extra_rows=*/2);
  LatentConfig cap = on_cuda(m.cfg);
  cap.max_topk = 64;
  LatentAttention attn(cap);
  const LatentDeviceLayer d(m, Device::cuda(0));
  EXPECT_TRUE(throws_error([&] { d.run(attn); }, ErrorKind::kInvalidArgument, "plan"));
  attn.plan(m.batch(), m.opts);
  const int64_t rows = m.q.shape()[0], H = 16;
  auto run_with = [&](const LatentLayer& y, const TensorView& out, const TensorView* lse) {
    return [&attn, y, out, lse] { attn.run(y, out, lse); };
  };
  const LatentLayer good = d.layer();
  const TensorView out = d.out->view();
  {
    LatentLayer y = good;
    y.q.dtype = DType::kFP16;
    EXPECT_TRUE(throws_error(run_with(y, out, &d.lse_view), ErrorKind::kTypeMismatch, "q"));
  }
  {
    LatentLayer y = good;
    y.q = m.q.view();  // on the host
    EXPECT_TRUE(throws_error(run_with(y, out, &d.lse_view), ErrorKind::kTypeMismatch, "q"));
  }
  {
    LatentLayer y = good;
    y.q.shape[0] = m.total_q() - 1;  // fewer rows than the plan's tokens
    EXPECT_TRUE(throws_error(run_with(y, out, &d.lse_view), ErrorKind::kInvalidArgument, "q"));
  }
  {
    LatentLayer y = good;
    y.q.data = static_cast<char*>(y.q.data) + 2;  // one element in: rows not 16-byte aligned
    y.q.shape[0] = rows - 1;
    EXPECT_TRUE(throws_error(run_with(y, out, &d.lse_view), ErrorKind::kInvalidArgument, "q"));
  }
  {
    LatentLayer y = good;
    y.kv_cache.shape[0] -= 1;  // not the config's num_blocks
    EXPECT_TRUE(throws_error(run_with(y, out, &d.lse_view), ErrorKind::kInvalidArgument, "kv_cache"));
  }
  {
    HostTensor host_out(DType::kBF16, {rows, H, 512});
    EXPECT_TRUE(throws_error(run_with(good, host_out.view(), &d.lse_view), ErrorKind::kTypeMismatch, "out"));
  }
  {
    const TensorView overlapping(d.lse->view().data, DType::kFP32, {rows, H}, {0, 1}, Device::cuda(0));
    EXPECT_TRUE(throws_error(run_with(good, out, &overlapping), ErrorKind::kInvalidArgument, "lse"));
  }
  {
    HostTensor idx(DType::kInt32, {rows, 64});
    const DeviceTensor didx(idx, Device::cuda(0));
    const TensorView iv = didx.view();
    LatentLayer y = good;
    y.indices = &iv;  // on a dense plan
    EXPECT_TRUE(throws_error(run_with(y, out, &d.lse_view), ErrorKind::kInvalidArgument, "indices"));
  }
  {
    LatentPlanOptions sparse = m.opts;
    sparse.topk = 64;
    attn.plan(m.batch(), sparse);
    EXPECT_TRUE(throws_error(run_with(good, out, &d.lse_view), ErrorKind::kInvalidArgument, "indices"));
    attn.plan(m.batch(), m.opts);
  }
  const LatentResult untouched = d.fetch(attn.info());
  EXPECT_TRUE(all_poison(untouched.out)) << "a rejected run() wrote out";
  EXPECT_TRUE(all_poison(untouched.lse)) << "a rejected run() wrote lse";
  EXPECT_TRUE(all_poison(untouched.max)) << "a rejected run() wrote max_logits";

  // A rejected plan (a block past num_blocks) leaves the previous one in force.
  LatentCase bad = m;
  bad.block_table[0] = static_cast<int32_t>(m.cfg.num_blocks);
  EXPECT_TRUE(throws_error([&] { attn.plan(bad.batch(), bad.opts); }, ErrorKind::kInvalidArgument, "block_table"));
  EXPECT_TRUE(attn.planned());
  d.run(attn);
  expect_matches(d.fetch(attn.info()), m, latent_reference(m));
}

}  // namespace
}  // namespace test
}  // namespace mlakit
