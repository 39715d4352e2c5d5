// Latent attention over FP8 caches on the CPU backend, against the float64 reference (which
// decodes each row exactly): DeepSeek-V3.2's fp8_ds_mla (656-byte rows: e4m3 codes of the latent,
// four float32 scales, the rope part in bf16) in dense decode at 1, 16 and 128 heads on page
// sizes 1 and 64 (empty, 1-token and split contexts), MTP causal, sparse by positions and slots
// with topk_length and sinks; vLLM's fp8 (L + R codes a row, one scale a layer) in decode, MTP
// and sparse, at small widths too. Then what a row decodes to: the same bits as a bf16 cache
// holding code x scale rounded once to bf16 (what the MLA step's gather hands its
// up-projection), the layer scale read at each run, and what the formats refuse: other cache
// dtypes and row widths, a missing or misplaced k_scale.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "mlakit/latent.h"
#include "mlakit/runtime.h"
#include "util/latent_case.h"
#include "util/latent_check.h"

namespace mlakit {
namespace test {
namespace {

LatentConfig fp8_config(int heads, int block_size) {
  LatentConfig c;
  c.num_heads = heads;
  c.block_size = block_size;
  c.kv_split_size = 512;
  c.kv_cache_dtype = KvCacheDtype::kFp8DsMla;
  return c;
}

void check_case(const LatentCase& m) { expect_matches(run_latent(m), m, latent_reference(m)); }

TEST(CpuLatentFp8, DecodeMatchesReference) {
  for (int heads : {1, 16, 128}) {
    for (int bs : {1, 64}) {
      SCOPED_TRACE("heads " + std::to_string(heads) + " page " + std::to_string(bs));
      const std::vector<int32_t> kv = heads == 128 ? std::vector<int32_t>{1, 0, 700} : std::vector<int32_t>{1, 2, 37, 0, 1100};
      check_case(make_latent_case(fp8_config(heads, bs), std::vector<int32_t>(kv.size(), 1), kv, 200 + heads + bs));
    }
  }
}

TEST(CpuLatentFp8, MtpCausal) {
  for (int heads : {16, 128}) {
    check_case(make_latent_case(fp8_config(heads, 64), {2, 4, 3}, {2, 700, 90}, 210 + heads, /*split_q=*/heads == 16));
  }
}

TEST(CpuLatentFp8, SparseMatchesReference) {
  for (LatentIndices kind : {LatentIndices::kPositions, LatentIndices::kSlots}) {
    LatentCase m = make_latent_case(fp8_config(16, 64), {1, 2, 40}, {900, 100, 3000}, 220);
    add_sparse(m, 600, kind, 221, /*with_topk_length=*/kind == LatentIndices::kSlots);
    m.use_sink = true;
    check_case(m);
  }
  LatentCase m = make_latent_case(fp8_config(128, 16), {1, 2}, {500, 80}, 222);
  add_sparse(m, 128, LatentIndices::kPositions, 223, true);
  check_case(m);
}

TEST(CpuLatentFp8, SameBitsAsTheDecodedBf16Cache) {
  // Dense and sparse, one and many row vectors: the FP8 path attends exactly the decoded rows,
  // whatever the scales (vLLM's unrounded amax / 448 among them).
  LatentCase fp8 = make_latent_case(fp8_config(16, 16), {1, 4, 1}, {700, 60, 2}, 230);
  std::mt19937_64 rng(234);
  fill_ds_mla_cache(fp8.cache, fp8.cfg.num_blocks * 16, rng, /*any_scales=*/true);
  fp8.cache = reshape_ds_mla(fp8.cache, fp8.cfg.num_blocks, 16);
  for (int topk : {0, 200}) {
    if (topk > 0) add_sparse(fp8, topk, LatentIndices::kPositions, 231, true);
    LatentCase bf16 = fp8;
    bf16.cfg.kv_cache_dtype = KvCacheDtype::kAuto;
    bf16.cache = decoded_bf16_cache(fp8.cache, KvCacheDtype::kFp8DsMla, 512, 64);
    const LatentResult a = run_latent(fp8), b = run_latent(bf16);
    EXPECT_TRUE(same_bits(a.out, b.out)) << "topk " << topk;
    EXPECT_TRUE(same_bits(a.lse, b.lse)) << "topk " << topk;
  }
}

TEST(CpuLatentFp8, NanCodesReachTheirRowsOnly) {
  // A NaN code (0x7f) in a key row a request sees makes its rows NaN; the other request's rows
  // stay right (a NaN is never swallowed, nor spread across requests).
  LatentCase m = make_latent_case(fp8_config(16, 16), {1, 1}, {40, 40}, 232);
  const int64_t slot = m.slot(0, 7);
  static_cast<uint8_t*>(m.cache.data())[slot * 656 + 3] = 0x7f;
  const LatentResult r = run_latent(m);
  const LatentRef ref = latent_reference(m);
  for (int64_t h = 0; h < 16; ++h) EXPECT_TRUE(std::isnan(r.out.get(h * 512 + 3))) << h;
  for (int64_t i = 16 * 512; i < 32 * 512; ++i) ASSERT_NEAR(r.out.get(i), ref.out.get(i), 2e-2 + 1e-2 * std::fabs(ref.out.get(i)));
}

TEST(CpuLatentFp8, CacheTensorRules) {
  LatentCase m = make_latent_case(fp8_config(4, 16), {1}, {20}, 233);
  LatentAttention attn(m.cfg);
  attn.plan(m.batch(), m.opts);
  HostTensor out(DType::kBF16, {1, 4, 512});
  auto run_with = [&](const TensorView& cache) {
    TensorView keep[5];
    LatentLayer y = m.layer(keep);
    y.kv_cache = cache;
    attn.run(y, out.view());
  };
  const int64_t nb = m.cfg.num_blocks;
  HostTensor bf16(DType::kBF16, {nb, 16, 576}), wide(DType::kUInt8, {nb, 16, 576}), e4m3(DType::kE4M3, {nb, 16, 656});
  EXPECT_TRUE(throws_error([&] { run_with(bf16.view()); }, ErrorKind::kTypeMismatch, "kv_cache"));
  EXPECT_TRUE(throws_error([&] { run_with(wide.view()); }, ErrorKind::kInvalidArgument, "kv_cache"));
  // Rows that do not start at a multiple of 4 bytes (the scales are float32).
  TensorView odd = m.cache.view();
  odd.strides[1] = 657;
  odd.strides[0] = 657 * 16;
  HostTensor big(DType::kUInt8, {nb * 16 * 657 + 1});
  odd.data = big.data();
  EXPECT_TRUE(throws_error([&] { run_with(odd); }, ErrorKind::kInvalidArgument, "kv_cache"));
  // e4m3 is the same bytes as uint8.
  std::memcpy(e4m3.data(), m.cache.data(), e4m3.nbytes());
  out.fill_bytes(0xFF);
  EXPECT_NO_THROW(run_with(e4m3.view()));
}

LatentConfig fp8_layer_config(int heads, int block_size) {
  LatentConfig c = fp8_config(heads, block_size);
  c.kv_cache_dtype = KvCacheDtype::kFp8;
  return c;
}

TEST(CpuLatentFp8Layer, DenseAndSparseMatchReference) {
  for (int heads : {1, 16, 128}) {
    SCOPED_TRACE("heads " + std::to_string(heads));
    check_case(make_latent_case(fp8_layer_config(heads, 16), {1, 1, 2, 4}, {1, 700, 37, 90}, 240 + heads));
  }
  LatentCase m = make_latent_case(fp8_layer_config(16, 64), {1, 2, 40}, {900, 100, 3000}, 243, /*split_q=*/true);
  add_sparse(m, 600, LatentIndices::kSlots, 244, true);
  m.use_sink = true;
  check_case(m);
  // Widths other than DeepSeek's (the CPU takes them).
  LatentConfig small = fp8_layer_config(4, 16);
  small.kv_lora_rank = 64;
  small.qk_rope_head_dim = 32;
  check_case(make_latent_case(small, {1, 3}, {50, 200}, 245));
}

TEST(CpuLatentFp8Layer, SameBitsAsTheDecodedBf16CacheAndScaleReadAtRun) {
  LatentCase fp8 = make_latent_case(fp8_layer_config(16, 16), {1, 4, 1}, {700, 60, 2}, 246);
  LatentAttention attn(fp8.cfg);
  attn.plan(fp8.batch(), fp8.opts);
  // A power of two (the exact table path) and two other scales (the float32 product rounded).
  for (float scale : {0.0078125f, 0.00390625f * 1.3f, 0.0123f}) {
    fp8.k_scale.set(0, scale);  // the same plan, the scale the layer holds now
    const LatentResult a = run_latent(fp8, &attn);
    LatentCase bf16 = fp8;
    bf16.cfg.kv_cache_dtype = KvCacheDtype::kAuto;
    bf16.cache = decoded_bf16_cache(fp8.cache, KvCacheDtype::kFp8, 512, 64, scale);
    const LatentResult b = run_latent(bf16);
    EXPECT_TRUE(same_bits(a.out, b.out)) << scale;
    EXPECT_TRUE(same_bits(a.lse, b.lse)) << scale;
  }
}

TEST(CpuLatentFp8Layer, KScaleRules) {
  LatentCase m = make_latent_case(fp8_layer_config(4, 16), {1}, {20}, 247);
  LatentAttention attn(m.cfg);
  attn.plan(m.batch(), m.opts);
  HostTensor out(DType::kBF16, {1, 4, 512});
  auto run_with = [&](const TensorView* k_scale, const TensorView* cache = nullptr) {
    TensorView keep[5];
    LatentLayer y = m.layer(keep);
    y.k_scale = k_scale;
    if (cache) y.kv_cache = *cache;
    attn.run(y, out.view());
  };
  HostTensor two(DType::kFP32, {2}), f16(DType::kFP16, {1});
  const TensorView v2 = two.view(), vf16 = f16.view();
  TensorView on_gpu = m.k_scale.view();
  on_gpu.device = Device::cuda(0);
  EXPECT_TRUE(throws_error([&] { run_with(nullptr); }, ErrorKind::kInvalidArgument, "k_scale"));
  EXPECT_TRUE(throws_error([&] { run_with(&v2); }, ErrorKind::kInvalidArgument, "k_scale"));
  EXPECT_TRUE(throws_error([&] { run_with(&vf16); }, ErrorKind::kTypeMismatch, "k_scale"));
  EXPECT_TRUE(throws_error([&] { run_with(&on_gpu); }, ErrorKind::kTypeMismatch, "k_scale"));
  HostTensor bf16_cache(DType::kBF16, {m.cfg.num_blocks, 16, 576});
  const TensorView vb = bf16_cache.view(), vs = m.k_scale.view();
  EXPECT_TRUE(throws_error([&] { run_with(&vs, &vb); }, ErrorKind::kTypeMismatch, "kv_cache"));
  // Other formats take no scale.
  LatentCase auto16 = make_latent_case(fp8_config(4, 16), {1}, {20}, 248);
  auto16.cfg.kv_cache_dtype = KvCacheDtype::kAuto;
  auto16.cache = HostTensor(DType::kBF16, {auto16.cfg.num_blocks, 16, 576});
  LatentAttention plain(auto16.cfg);
  plain.plan(auto16.batch(), auto16.opts);
  TensorView keep[5];
  LatentLayer y = auto16.layer(keep);
  y.k_scale = &vs;
  EXPECT_TRUE(throws_error([&] { plain.run(y, out.view()); }, ErrorKind::kTypeMismatch, "k_scale"));
}

}  // namespace
}  // namespace test
}  // namespace mlakit
