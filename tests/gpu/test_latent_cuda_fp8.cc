// LatentAttention on CUDA over FP8 caches (the Hopper kernel decoding the rows into its bf16
// stages) against the float64 reference, outputs NaN-poisoned and checked fully written.
// DeepSeek-V3.2's fp8_ds_mla (656-byte rows): decode over ragged contexts (0, 1, odd, around a 64-key tile, split) at
// 1, 16 and 128 heads on page sizes 1, 16 and 64; MTP and an extend, causal; sparse plans
// (positions and slots, -1 padding, repeats, the cache's ends, topk_length, sinks, topk 64 to
// 2048). Then the decoded values: the 16-bit kernel run on a bf16 cache holding code x scale
// rounded once to bf16 (whatever the scales), which is also what the CPU backend attends, gives
// the same outputs within 1% of their largest (the kernels add and round P in different orders;
// a misdecoded value is off by its own size);
// a NaN code reaching only its own rows; a request alone equal to it inside a batch. vLLM's fp8
// (576 codes a row, the layer's scale from device memory): decode, MTP and sparse against the
// reference, against the decoded bf16 cache, and the scale read when the kernel runs (a
// captured graph replayed after the scale changes).
//
// Every test skips, saying why, where LatentAttention cannot run on CUDA.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/latent_device_case.h"
#include "mlakit/latent.h"
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

LatentConfig fp8_config(int heads, int block_size) {
  LatentConfig c;
  c.num_heads = heads;
  c.block_size = block_size;
  c.kv_cache_dtype = KvCacheDtype::kFp8DsMla;
  return c;
}

LatentResult check_case(const LatentCase& m) {
  const LatentRef ref = latent_reference(m);
  LatentResult r = run_latent_cuda(m);
  expect_matches(r, m, ref);
  return r;
}

// The case with its cache replaced by the bf16 rows it decodes to.
LatentCase decoded_twin(const LatentCase& fp8) {
  LatentCase bf16 = fp8;
  bf16.cfg.kv_cache_dtype = KvCacheDtype::kAuto;
  bf16.cache = decoded_bf16_cache(fp8.cache, KvCacheDtype::kFp8DsMla, 512, 64);
  return bf16;
}

class CudaLatentFp8Test : public ::testing::Test {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_NO_LATENT_CUDA(); }
};

class CudaLatentFp8Decode : public ::testing::TestWithParam<std::tuple<int, int>> {  // heads, page size
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_NO_LATENT_CUDA(); }
};

TEST_P(CudaLatentFp8Decode, MatchesReference) {
  const auto [heads, bs] = GetParam();
  const std::vector<int32_t> kv = {1, 2, 0, 37, 63, 64, 65, 129, 700};
  const LatentCase m = make_latent_case(fp8_config(heads, bs), std::vector<int32_t>(kv.size(), 1), kv,
                                        900 + heads + bs, /*split_q=*/bs == 16, /*extra_rows=*/2);
  check_case(m);
}

INSTANTIATE_TEST_SUITE_P(HeadsPages, CudaLatentFp8Decode,
                         ::testing::Combine(::testing::Values(1, 16, 128), ::testing::Values(1, 16, 64)),
                         [](const auto& i) {
                           return "H" + std::to_string(std::get<0>(i.param)) + "_page" +
                                  std::to_string(std::get<1>(i.param));
                         });

TEST_F(CudaLatentFp8Test, MtpAndExtendCausal) {
  for (int heads : {16, 128}) {
    SCOPED_TRACE("heads " + std::to_string(heads));
    check_case(make_latent_case(fp8_config(heads, 64), {2, 4, 3, 64}, {2, 700, 90, 300}, 910 + heads));
  }
}

TEST_F(CudaLatentFp8Test, SparseMatchesReference) {
  struct P {
    int heads, bs;
    LatentIndices kind;
    int topk;
  };
  for (const P& p : {P{16, 64, LatentIndices::kPositions, 64}, P{16, 1, LatentIndices::kSlots, 600},
                     P{128, 64, LatentIndices::kPositions, 2048}, P{128, 16, LatentIndices::kSlots, 200}}) {
    SCOPED_TRACE("heads " + std::to_string(p.heads) + " topk " + std::to_string(p.topk));
    LatentCase m = make_latent_case(fp8_config(p.heads, p.bs), {1, 2, 40, 1}, {900, 100, 2500, 0},
                                    920 + p.heads + p.topk, /*split_q=*/false, /*extra_rows=*/2);
    for (bool with_len : {false, true}) {
      add_sparse(m, p.topk, p.kind, 930 + p.topk, with_len);
      m.use_sink = with_len;
      check_case(m);
    }
  }
}

// The FP8 kernel and the 16-bit kernel over the decoded rows: the same attention but for the
// order of their additions.
void expect_matches(const LatentResult& a, const LatentResult& b, const std::string& what) {
  EXPECT_LE(max_abs_diff(a.out, b.out), 1e-2 * max_abs(b.out)) << what;
  EXPECT_LE(max_abs_diff(a.lse, b.lse), 1e-3) << what;
  if (a.max.numel() > 0) EXPECT_LE(max_abs_diff(a.max, b.max), 1e-3) << what;
}

TEST_F(CudaLatentFp8Test, MatchesTheDecodedBf16Cache) {
  // Any float32 scales (vLLM's unrounded amax / 448 among them): the kernel attends the decoded
  // rows, dense (one and several 64-row blocks, splits) and sparse.
  for (int heads : {16, 128}) {
    SCOPED_TRACE("heads " + std::to_string(heads));
    LatentCase fp8 = make_latent_case(fp8_config(heads, 16), {1, 4, 1, 33}, {1500, 60, 2, 200}, 940 + heads);
    std::mt19937_64 rng(941);
    fill_ds_mla_cache(fp8.cache, fp8.cfg.num_blocks * 16, rng, /*any_scales=*/true);
    fp8.cache = reshape_ds_mla(fp8.cache, fp8.cfg.num_blocks, 16);
    for (int topk : {0, 700}) {
      if (topk > 0) add_sparse(fp8, topk, LatentIndices::kPositions, 942, true);
      expect_matches(run_latent_cuda(fp8), run_latent_cuda(decoded_twin(fp8)), "topk " + std::to_string(topk));
    }
  }
}

TEST_F(CudaLatentFp8Test, NanCodeReachesItsRowsOnly) {
  LatentCase m = make_latent_case(fp8_config(16, 16), {1, 1}, {100, 100}, 950);
  static_cast<uint8_t*>(m.cache.data())[m.slot(0, 70) * 656 + 300] = 0x7f;  // request 0's key 70
  const LatentResult r = run_latent_cuda(m);
  const LatentRef ref = latent_reference(m);
  for (int64_t h = 0; h < 16; ++h) EXPECT_TRUE(std::isnan(r.out.get(h * 512 + 300))) << h;
  for (int64_t i = 16 * 512; i < 32 * 512; ++i) {
    ASSERT_NEAR(r.out.get(i), ref.out.get(i), 2e-2 + 1e-2 * std::fabs(ref.out.get(i))) << i;
  }
}

TEST_F(CudaLatentFp8Test, RequestAloneEqualsRequestInBatch) {
  const std::vector<int32_t> q = {1, 3, 1, 70}, kv = {1800, 40, 520, 300};
  LatentCase batch = make_latent_case(fp8_config(128, 64), q, kv, 960);
  batch.opts.batch_invariant = true;
  const LatentResult all = run_latent_cuda(batch);
  int64_t t0 = 0;
  for (size_t r = 0; r < q.size(); ++r) {
    SCOPED_TRACE("request " + std::to_string(r));
    const LatentResult alone = run_latent_cuda(single_request(batch, r));
    EXPECT_EQ(token_rows(alone.out, 0, q[r]), token_rows(all.out, t0, q[r]));
    EXPECT_EQ(token_rows(alone.lse, 0, q[r]), token_rows(all.lse, t0, q[r]));
    t0 += q[r];
  }
}

LatentConfig fp8_layer_config(int heads, int block_size) {
  LatentConfig c = fp8_config(heads, block_size);
  c.kv_cache_dtype = KvCacheDtype::kFp8;
  return c;
}

TEST_F(CudaLatentFp8Test, LayerScaleMatchesReference) {
  for (int heads : {1, 16, 128}) {
    for (int bs : {1, 64}) {
      SCOPED_TRACE("heads " + std::to_string(heads) + " page " + std::to_string(bs));
      check_case(make_latent_case(fp8_layer_config(heads, bs), {1, 1, 2, 4, 1}, {1, 700, 37, 90, 0}, 970 + heads + bs,
                                  /*split_q=*/bs == 1, /*extra_rows=*/2));
    }
  }
  LatentCase m = make_latent_case(fp8_layer_config(128, 16), {1, 2, 40}, {900, 100, 2500}, 975);
  add_sparse(m, 2048, LatentIndices::kPositions, 976, true);
  m.use_sink = true;
  check_case(m);
}

TEST_F(CudaLatentFp8Test, LayerScaleMatchesTheDecodedBf16Cache) {
  LatentCase fp8 = make_latent_case(fp8_layer_config(16, 16), {1, 4, 1, 33}, {1500, 60, 2, 200}, 980);
  for (float scale : {0.00390625f * 1.3f, 0.0123f}) {  // scales that are no power of two
    fp8.k_scale.set(0, scale);
    LatentCase bf16 = fp8;
    bf16.cfg.kv_cache_dtype = KvCacheDtype::kAuto;
    bf16.cache = decoded_bf16_cache(fp8.cache, KvCacheDtype::kFp8, 512, 64, scale);
    expect_matches(run_latent_cuda(fp8), run_latent_cuda(bf16), "scale " + std::to_string(scale));
  }
}

TEST_F(CudaLatentFp8Test, LayerScaleReadWhenAGraphReplays) {
  // A run captured in a CUDA graph reads the scale buffer's value of each replay.
#if MLAKIT_WITH_CUDA
  LatentCase m = make_latent_case(fp8_layer_config(16, 64), {1, 2}, {700, 90}, 985);
  LatentAttention attn(on_cuda(m.cfg));
  const LatentDeviceLayer d(m, Device::cuda(0));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const Stream st = stream;
  attn.plan(m.batch(), m.opts, st);
  d.run(attn, st);  // one-time kernel setup outside the capture
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  CapturedGraph graph;
  ASSERT_TRUE(graph.capture(stream, [&] { d.run(attn, st); }));
  for (float scale : {0.0078125f, 0.03125f}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    m.k_scale.set(0, scale);
    d.load(m, st);
    d.poison_outputs(st);
    ASSERT_EQ(graph.launch(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    expect_matches(d.fetch(attn.info()), m, latent_reference(m));
  }
  cudaStreamDestroy(stream);
#endif
}

}  // namespace
}  // namespace test
}  // namespace mlakit
