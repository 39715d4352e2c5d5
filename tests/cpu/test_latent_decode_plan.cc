// The latent planner's decode once for FP8 caches (contract/latent_layout.h, LatentConfig::
// max_decoded_rows), host code run here as a CUDA object's plan() runs it: which plans decode
// their rows into the workspace (kAuto: items reading each row at least kDecodeOnceReads times;
// kOnce; never past the workspace, never kInKernel, never kSlots, never without a workspace), and
// what a decoded block holds: the workspace's blocks as the pages (request r's consecutive), the
// cache's pages and page size as the decode's source (or the engine's device table), the same
// items as the plan that does not decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "contract/latent_layout.h"
#include "mlakit/error.h"
#include "mlakit/latent.h"
#include "plan/latent_checks.h"
#include "plan/latent_schedule.h"

namespace mlakit {
namespace test {
namespace {

constexpr int kSms = 132;

struct Request {
  int q, kv;
};

struct Decoded {
  plan::LatentScheduleResult r;
  latent::LatentHeader h;
  std::vector<uint8_t> block;
  std::vector<int32_t> table;
  int cols = 0;

  const int32_t* at(int32_t offset) const { return reinterpret_cast<const int32_t*>(block.data() + offset); }
  std::vector<latent::LatentItem> items() const {
    const auto* it = reinterpret_cast<const latent::LatentItem*>(block.data() + h.items_offset);
    return {it, it + h.num_items};
  }
};

// Plans `reqs` at `heads` on a cache of page `page` whose block table numbers each request's
// blocks from 1000 * (r + 1) (so a source page is told from a workspace block), with a workspace
// of `decoded_rows` rows (the CUDA backend's choice for an FP8 cache).
Decoded plan_reqs(const std::vector<Request>& reqs, int heads, int page, int64_t decoded_rows, int topk = 0,
                  LatentFp8Decode mode = LatentFp8Decode::kAuto, bool device_table = false,
                  LatentIndices indices = LatentIndices::kPositions) {
  const int batch = static_cast<int>(reqs.size());
  int max_kv = 0;
  int64_t sum_q = 0, sum_kv = 0;
  for (const Request& r : reqs) max_kv = std::max(max_kv, r.kv), sum_q += r.q, sum_kv += r.kv;
  LatentConfig c;
  c.num_heads = heads;
  c.block_size = page;
  c.kv_cache_dtype = KvCacheDtype::kFp8DsMla;
  c.max_batch = batch;
  c.max_q_tokens = sum_q;
  c.max_kv_tokens = sum_kv;
  c.max_topk = topk;
  c.max_decoded_rows = decoded_rows;
  Decoded d;
  d.cols = (max_kv + page - 1) / page;
  c.num_blocks = 1000 * (batch + 1) + d.cols;
  std::vector<int32_t> ql, kl;
  d.table.resize(static_cast<size_t>(batch) * d.cols);
  for (int r = 0; r < batch; ++r) {
    ql.push_back(reqs[r].q);
    kl.push_back(reqs[r].kv);
    for (int j = 0; j < d.cols; ++j) d.table[static_cast<size_t>(r) * d.cols + j] = 1000 * (r + 1) + j;
  }
  LatentBatch b{batch, ql.data(), kl.data(), nullptr, d.cols};
  if (device_table) b.device_block_table = d.table.data();  // only its address is planned
  else b.block_table = d.table.data();
  if (indices == LatentIndices::kSlots) b = LatentBatch{batch, ql.data(), nullptr, nullptr, 0};
  LatentPlanOptions o;
  o.topk = topk;
  o.indices = indices;
  o.fp8_decode = mode;
  const latent::LatentLayout layout =
      latent::make_layout(heads, 64, page, batch, sum_q, sum_kv, topk, 512, decoded_rows);
  d.block.assign(layout.total_bytes, 0xEE);
  plan::LatentScheduler s(c, layout, 64, 512, kSms);
  d.r = s.build(b, o, plan::check_latent_plan(c, b, o), d.block.data());
  std::memcpy(&d.h, d.block.data(), sizeof(d.h));
  return d;
}

// A decoded block against its requests: pages = workspace blocks 0, 1, ... in request order (a
// request without new tokens none), the source indptr and pages the cache's, the header the
// workspace's page size and the cache's.
void expect_decoded_layout(const Decoded& d, const std::vector<Request>& reqs, int page, bool device_table) {
  ASSERT_EQ(d.h.decoded, 1);
  EXPECT_EQ(d.h.block_size, latent::kDecodedBlockRows);
  EXPECT_EQ(d.h.device_table, 0);
  EXPECT_EQ(d.h.src_block_size, page);
  const int32_t* ws_ptr = d.at(d.h.page_indptr_offset);
  const int32_t* pages = d.at(d.h.pages_offset);
  int64_t blocks = 0;
  for (size_t r = 0; r < reqs.size(); ++r) {
    ASSERT_EQ(ws_ptr[r], blocks) << "request " << r;
    if (reqs[r].q > 0) blocks += (reqs[r].kv + 63) / 64;
  }
  ASSERT_EQ(ws_ptr[reqs.size()], blocks);
  EXPECT_EQ(d.h.decoded_pages, blocks);
  EXPECT_EQ(d.r.decoded_rows, blocks * 64);
  for (int64_t g = 0; g < blocks; ++g) ASSERT_EQ(pages[g], g);
  if (device_table) {
    EXPECT_EQ(d.h.src_device_table, static_cast<int64_t>(reinterpret_cast<uintptr_t>(d.table.data())));
    EXPECT_EQ(d.h.src_table_cols, d.cols);
    EXPECT_EQ(d.r.used_bytes, static_cast<size_t>(d.h.src_pages_offset));  // no source pages in the block
    return;
  }
  EXPECT_EQ(d.h.src_device_table, 0);
  EXPECT_EQ(d.h.src_pages_offset, d.h.pages_offset + static_cast<int32_t>(sizeof(int32_t) * blocks));
  const int32_t* src_ptr = d.at(d.h.src_page_indptr_offset);
  ASSERT_EQ(src_ptr[0], 0);
  for (size_t r = 0; r < reqs.size(); ++r) {
    const int n = (reqs[r].kv + page - 1) / page;
    ASSERT_EQ(src_ptr[r + 1] - src_ptr[r], n) << "request " << r;
    const int32_t* src = latent::request_src_pages(d.h, d.block.data(), static_cast<int>(r));
    for (int j = 0; j < n; ++j) ASSERT_EQ(src[j], d.table[r * d.cols + j]) << "request " << r << " page " << j;
  }
  EXPECT_EQ(d.r.used_bytes, static_cast<size_t>(d.h.src_pages_offset) + sizeof(int32_t) * src_ptr[reqs.size()]);
}

void expect_same_items(const Decoded& a, const Decoded& b) {
  const std::vector<latent::LatentItem> x = a.items(), y = b.items();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(std::memcmp(&x[i], &y[i], sizeof(x[i])), 0) << "item " << i;
  }
  EXPECT_EQ(a.r.split_size, b.r.split_size);
  EXPECT_EQ(a.r.partial_rows, b.r.partial_rows);
}

TEST(LatentDecodePlan, SparsePrefillDecodesItsRowsOnceWithTheSameItems) {
  // 96 tokens of one request at 128 heads over 8,000 keys, top-k 2048: 2 x 96 x 2048 reads of
  // 8,000 rows (x49); a second request without new tokens takes no workspace.
  const std::vector<Request> reqs{{96, 8000}, {0, 3000}, {5, 777}};
  for (const int page : {1, 16, 64, 256}) {
    const Decoded d = plan_reqs(reqs, 128, page, 1 << 16, 2048);
    expect_decoded_layout(d, reqs, page, false);
    const Decoded k = plan_reqs(reqs, 128, page, 1 << 16, 2048, LatentFp8Decode::kInKernel);
    EXPECT_EQ(k.h.decoded, 0);
    EXPECT_EQ(k.h.block_size, page);
    EXPECT_EQ(k.r.decoded_rows, 0);
    expect_same_items(d, k);
  }
}

TEST(LatentDecodePlan, DenseExtendDecodesOnceAndDecodeDoesNot) {
  // Extend: 64 new tokens at 128 heads are 128 row blocks, each reading the context.
  const std::vector<Request> extend{{64, 4096}, {64, 1000}};
  expect_decoded_layout(plan_reqs(extend, 128, 64, 1 << 14), extend, 64, false);
  // Decode at 128 heads: two items read each row (< 3): decoded only when asked.
  const std::vector<Request> decode(16, Request{1, 4096});
  EXPECT_EQ(plan_reqs(decode, 128, 64, 1 << 20).h.decoded, 0);
  expect_decoded_layout(plan_reqs(decode, 128, 64, 1 << 20, 0, LatentFp8Decode::kOnce), decode, 64, false);
  // MTP-2: at 128 heads 4 blocks a request read each row 4 times (>= 3) and decode once; at 64
  // heads 2 blocks do not.
  const std::vector<Request> mtp2(4, Request{2, 4096});
  EXPECT_EQ(plan_reqs(mtp2, 128, 64, 1 << 20).h.decoded, 1);
  EXPECT_EQ(plan_reqs(mtp2, 64, 64, 1 << 20).h.decoded, 0);
}

TEST(LatentDecodePlan, RowsPastTheWorkspaceDecodeInTheKernel) {
  // Rows round up to 64 per request: 4097 keys take 4160 rows.
  const std::vector<Request> reqs{{64, 4097}};
  EXPECT_EQ(plan_reqs(reqs, 128, 16, 4160).h.decoded, 1);
  EXPECT_EQ(plan_reqs(reqs, 128, 16, 4159).h.decoded, 0);   // the capacity rounds down to 4096
  EXPECT_EQ(plan_reqs(reqs, 128, 16, 4096, 0, LatentFp8Decode::kOnce).h.decoded, 0);
  EXPECT_EQ(plan_reqs(reqs, 128, 16, 0, 0, LatentFp8Decode::kOnce).h.decoded, 0);  // no workspace
}

TEST(LatentDecodePlan, SlotIndicesDecodeInTheKernel) {
  // kSlots entries name any row of the cache: there is no request's context to decode.
  const std::vector<Request> reqs{{96, 8000}};
  const Decoded d = plan_reqs(reqs, 128, 64, 1 << 16, 2048, LatentFp8Decode::kOnce, false, LatentIndices::kSlots);
  EXPECT_EQ(d.h.decoded, 0);
  EXPECT_EQ(d.r.decoded_rows, 0);
}

TEST(LatentDecodePlan, DeviceBlockTablesAreTheDecodesSource) {
  const std::vector<Request> reqs{{64, 5000}, {32, 100}};
  const Decoded d = plan_reqs(reqs, 128, 16, 1 << 16, 0, LatentFp8Decode::kAuto, true);
  expect_decoded_layout(d, reqs, 16, true);
  const Decoded k = plan_reqs(reqs, 128, 16, 1 << 16, 0, LatentFp8Decode::kInKernel, true);
  EXPECT_EQ(k.h.decoded, 0);
  EXPECT_EQ(k.h.device_table, static_cast<int64_t>(reinterpret_cast<uintptr_t>(k.table.data())));
  EXPECT_EQ(k.h.table_cols, d.cols);
}

TEST(LatentDecodePlan, CpuObjectsNeverDecodeAndBadValuesAreRefused) {
  LatentConfig c;
  c.num_heads = 16;
  c.kv_cache_dtype = KvCacheDtype::kFp8DsMla;
  c.num_blocks = 64;
  c.max_batch = 2;
  c.max_q_tokens = 256;
  c.max_kv_tokens = 4096;
  c.max_decoded_rows = 1 << 16;
  LatentAttention attn(c);  // the CPU decodes each chunk of rows as it reads them: no workspace
  std::vector<int32_t> ql{128}, kl{4096}, table(64);
  for (int i = 0; i < 64; ++i) table[i] = i;
  LatentPlanOptions o;
  o.fp8_decode = LatentFp8Decode::kOnce;
  attn.plan(LatentBatch{1, ql.data(), kl.data(), table.data(), 64}, o);
  EXPECT_EQ(attn.info().decoded_rows, 0);

  LatentConfig bad = c;
  bad.max_decoded_rows = -1;
  try {
    LatentAttention x(bad);
    FAIL() << "a negative max_decoded_rows was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.argument(), "config.max_decoded_rows");
  }
  o.fp8_decode = static_cast<LatentFp8Decode>(7);
  try {
    attn.plan(LatentBatch{1, ql.data(), kl.data(), table.data(), 64}, o);
    FAIL() << "fp8_decode 7 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "options.fp8_decode");
  }
  EXPECT_TRUE(attn.planned());  // the plan before stays in force
}

}  // namespace
}  // namespace test
}  // namespace mlakit
