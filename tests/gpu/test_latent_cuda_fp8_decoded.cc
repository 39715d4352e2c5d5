// LatentAttention on CUDA over FP8 caches decoded once (LatentConfig::max_decoded_rows): a plan
// whose items read each row many times has its requests' rows decoded into the bf16 workspace,
// then attended by the 16-bit kernel. Against the float64 reference (outputs NaN-poisoned and
// checked fully written) on both FP8 formats and page sizes 1, 16 and 64: extends (causal, rows
// of many 64-row blocks, a request without new tokens, a context that ends inside a block) and
// DSA prefill (positions, -1 padding, repeats, topk_length, sinks); bit for bit the 16-bit kernel
// on the bf16 cache the rows decode to (the same items, the same values); the engine's device
// block table as the decode's source; and one captured run replaying plans of either kind (decoded,
// then decoded in the kernel, then decoded again with other lengths).
//
// Every test skips, saying why, where LatentAttention cannot run on CUDA.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
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

LatentConfig decoded_config(KvCacheDtype format, int heads, int block_size) {
  LatentConfig c;
  c.num_heads = heads;
  c.block_size = block_size;
  c.kv_cache_dtype = format;
  c.max_decoded_rows = 1 << 16;
  return c;
}

// The case with its cache replaced by the bf16 rows it decodes to, on a 16-bit config.
LatentCase bf16_twin(const LatentCase& fp8) {
  LatentCase bf16 = fp8;
  bf16.cfg.kv_cache_dtype = KvCacheDtype::kAuto;
  bf16.cfg.max_decoded_rows = 0;
  const float scale = fp8.cfg.kv_cache_dtype == KvCacheDtype::kFp8 ? fp8.k_scale.get(0) : 1.0f;
  bf16.cache = decoded_bf16_cache(fp8.cache, fp8.cfg.kv_cache_dtype, 512, 64, scale);
  return bf16;
}

bool same_results(const LatentResult& a, const LatentResult& b) {
  return same_bits(a.out, b.out) && same_bits(a.lse, b.lse) && same_bits(a.max, b.max);
}

// Runs m decoded once (kOnce), checks it against the reference and the 16-bit kernel on the
// decoded rows (bit for bit), and, decoded in the kernel (kInKernel), against the reference.
void check_decoded(LatentCase m, const std::string& what) {
  SCOPED_TRACE(what);
  const LatentRef ref = latent_reference(m);
  m.opts.fp8_decode = LatentFp8Decode::kOnce;
  LatentAttention attn(on_cuda(m.cfg));
  const LatentResult once = run_latent_cuda(m, &attn);
  EXPECT_GT(attn.info().decoded_rows, 0) << "the plan did not decode once";
  expect_matches(once, m, ref);
  EXPECT_TRUE(same_results(once, run_latent_cuda(bf16_twin(m)))) << "differs from the 16-bit kernel on the decoded rows";
  m.opts.fp8_decode = LatentFp8Decode::kInKernel;
  const LatentResult in_kernel = run_latent_cuda(m, &attn);
  EXPECT_EQ(attn.info().decoded_rows, 0);
  expect_matches(in_kernel, m, ref);
}

class CudaLatentFp8Decoded : public ::testing::TestWithParam<std::tuple<KvCacheDtype, int>> {  // format, page
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_NO_LATENT_CUDA(); }
};

TEST_P(CudaLatentFp8Decoded, ExtendMatchesReferenceAndTheBf16Kernel) {
  const auto [format, bs] = GetParam();
  for (int heads : {16, 128}) {
    // 64 new tokens over 700 keys; 3 over 90 (a context ending inside a 64-row block); none over
    // 50 (no workspace rows); 40 over 2500 (splits at 16 heads); one key.
    const LatentCase m = make_latent_case(decoded_config(format, heads, bs), {64, 3, 0, 40, 1}, {700, 90, 50, 2500, 1},
                                          1100 + heads + bs, /*split_q=*/bs == 16, /*extra_rows=*/2);
    check_decoded(m, "extend, heads " + std::to_string(heads));
  }
}

TEST_P(CudaLatentFp8Decoded, SparsePrefillMatchesReferenceAndTheBf16Kernel) {
  const auto [format, bs] = GetParam();
  for (int topk : {64, 2048}) {
    LatentCase m = make_latent_case(decoded_config(format, 128, bs), {1, 2, 40, 1}, {900, 100, 2500, 0},
                                    1120 + topk + bs, /*split_q=*/false, /*extra_rows=*/2);
    m.cfg.max_topk = topk;
    for (bool with_len : {false, true}) {
      add_sparse(m, topk, LatentIndices::kPositions, 1130 + topk, with_len);
      m.use_sink = with_len;
      check_decoded(m, "sparse, topk " + std::to_string(topk) + (with_len ? ", topk_length and sink" : ""));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FormatsPages, CudaLatentFp8Decoded,
                         ::testing::Combine(::testing::Values(KvCacheDtype::kFp8DsMla, KvCacheDtype::kFp8),
                                            ::testing::Values(1, 16, 64)),
                         [](const auto& i) {
                           return std::string(std::get<0>(i.param) == KvCacheDtype::kFp8 ? "fp8" : "fp8_ds_mla") +
                                  "_page" + std::to_string(std::get<1>(i.param));
                         });

class CudaLatentFp8DecodedTest : public ::testing::Test {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_NO_LATENT_CUDA(); }
};

TEST_F(CudaLatentFp8DecodedTest, DeviceBlockTableIsTheDecodesSource) {
  LatentCase m = make_latent_case(decoded_config(KvCacheDtype::kFp8DsMla, 128, 16), {64, 3, 40}, {700, 90, 2500}, 1140);
  m.opts.fp8_decode = LatentFp8Decode::kOnce;
  const LatentResult host = run_latent_cuda(m);
  // The table's rows at a wider stride, the columns past a request's -1.
  const int wide = m.cols + 3;
  HostTensor table(DType::kInt32, {static_cast<int64_t>(m.q_lens.size()), wide});
  for (size_t r = 0; r < m.q_lens.size(); ++r)
    for (int c = 0; c < wide; ++c)
      table.set(static_cast<int64_t>(r) * wide + c, c < m.cols ? m.block_table[r * m.cols + c] : -1);
  const DeviceTensor dtable(table, Device::cuda(0));
  LatentBatch b = m.batch();
  b.block_table = nullptr;
  b.device_block_table = static_cast<const int32_t*>(dtable.view().data);
  b.block_table_cols = wide;
  LatentAttention attn(on_cuda(m.cfg));
  LatentCudaRun how;
  how.batch = &b;
  const LatentResult dev = run_latent_cuda(m, &attn, how);
  EXPECT_GT(attn.info().decoded_rows, 0);
  EXPECT_TRUE(same_results(host, dev));
  expect_matches(dev, m, latent_reference(m));
}

TEST_F(CudaLatentFp8DecodedTest, GraphReplaysDecodedAndInKernelPlans) {
  // One captured run, replayed after plans that decode once, decode in the kernel, and decode
  // once over other lengths: the decode, the 16-bit kernel and the FP8 kernel are all in the
  // graph, each reading from the plan whether it has the plan's work.
#if MLAKIT_WITH_CUDA
  LatentConfig cap = decoded_config(KvCacheDtype::kFp8DsMla, 128, 16);
  cap.max_batch = 4;
  cap.max_q_tokens = 80;
  cap.max_kv_tokens = 4096;
  cap.num_blocks = 300;
  struct Step {
    std::vector<int32_t> q, kv;
    LatentFp8Decode mode;
  };
  const std::vector<Step> steps = {{{64, 3}, {700, 90}, LatentFp8Decode::kOnce},
                                   {{40, 1, 2}, {2500, 5, 300}, LatentFp8Decode::kInKernel},
                                   {{8, 70}, {1000, 2000}, LatentFp8Decode::kAuto}};
  std::vector<LatentCase> cases;
  for (size_t s = 0; s < steps.size(); ++s) {
    const int64_t tq = std::accumulate(steps[s].q.begin(), steps[s].q.end(), int64_t{0});
    cases.push_back(make_latent_case(cap, steps[s].q, steps[s].kv, 1150 + s, false,
                                     static_cast<int>(cap.max_q_tokens - tq)));
    cases.back().opts.fp8_decode = steps[s].mode;
  }
  LatentAttention attn(on_cuda(cap));
  const LatentDeviceLayer d(cases[0], Device::cuda(0));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const Stream st = stream;
  attn.plan(cases[0].batch(), cases[0].opts, st);
  d.run(attn, st);  // one-time kernel setup outside the capture
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  CapturedGraph graph;
  ASSERT_TRUE(graph.capture(stream, [&] { d.run(attn, st); }));
  for (size_t s = 0; s < cases.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const LatentCase& m = cases[s];
    d.load(m, st);
    d.poison_outputs(st);
    attn.plan(m.batch(), m.opts, st);
    EXPECT_EQ(attn.info().decoded_rows > 0, steps[s].mode != LatentFp8Decode::kInKernel);
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
#endif
}

}  // namespace
}  // namespace test
}  // namespace mlakit
