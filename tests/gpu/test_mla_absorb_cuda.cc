// The MLA step's absorbed requests on CUDA (mlakit/mla.h, absorb_max_query_len): steps that mix
// decode, MTP and extend requests (attended in latent space by the Hopper latent kernel) with
// prefill chunks (up-projected), against the float64 reference and the cache expected after them,
// at 16 and 128 heads, block sizes 16 and 64, in one launch and with context chunks, on the
// 16-bit and fp8_ds_mla caches; and a prefill followed by decode and MTP steps through one
// captured CUDA graph, replayed after re-planning (the absorbed launches sized for any step).
// Outputs are NaN-poisoned before every run.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_case.h"
#include "gpu/latent_device_case.h"
#include "gpu/mla_device_layer.h"
#include "mlakit/mlakit.h"
#include "util/mla_case.h"
#include "util/mla_steps.h"
#include "util/test_util.h"

#if MLAKIT_WITH_CUDA
#include <cuda_runtime.h>

#include "gpu/captured_graph.h"
#endif

namespace mlakit {
namespace test {
namespace {

struct AbsorbCase {
  int heads, block_size;
  std::vector<int32_t> q, ctx;
  int64_t workspace_rows;  // 0 = one launch
  KvCacheDtype format;
  int absorbed;            // requests the step absorbs at absorb_max_query_len 4
};

std::string absorb_name(const ::testing::TestParamInfo<AbsorbCase>& i) {
  const AbsorbCase& c = i.param;
  return "h" + std::to_string(c.heads) + "_bs" + std::to_string(c.block_size) + "_ws" +
         std::to_string(c.workspace_rows) + "_" + kv_cache_dtype_name(c.format) + "_" + std::to_string(i.index);
}

class CudaMlaAbsorb : public ::testing::TestWithParam<AbsorbCase> {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_NO_LATENT_CUDA(); }
};

TEST_P(CudaMlaAbsorb, MixedStepMatchesTheReference) {
  const AbsorbCase ac = GetParam();
  MlaConfig cfg;
  cfg.num_heads = ac.heads;
  cfg.block_size = ac.block_size;
  cfg.kv_cache_dtype = ac.format;
  cfg.workspace_rows = ac.workspace_rows;
  cfg.absorb_max_query_len = 4;
  const MlaCase m = make_mla_case(cfg, ac.q, ac.ctx, 7 + ac.heads + ac.block_size);
  MlaConfig gcfg = m.cfg;
  gcfg.device = Device::cuda(0);
  MlaStep step(gcfg);
  step.plan(m.batch());
  EXPECT_EQ(step.info().absorbed_requests, ac.absorbed);
  EXPECT_EQ(step.info().chunked, ac.workspace_rows > 0);
  DeviceLayer d(m, gcfg.device);
  TensorView lse = d.lse->view();
  step.run(d.layer(), d.out->view(), &lse);
  synchronize(gcfg.device);
  const Fetched f = fetch(d, m);
  expect_matches(f, m, mla_reference(m));
  EXPECT_EQ(f.cache.bytes(), expected_cache(m).bytes()) << "cache write";
}

INSTANTIATE_TEST_SUITE_P(
    Steps, CudaMlaAbsorb,
    ::testing::Values(
        // Decode (1), MTP (2, 3), extend (4) among prefill chunks; a request with no new token, one
        // with more new tokens than context, contexts of one token and across blocks.
        AbsorbCase{16, 16, {1, 300, 2, 4, 0, 3, 77, 1}, {400, 20, 1, 129, 50, 1000, 5, 0}, 0, KvCacheDtype::kAuto, 3},
        AbsorbCase{16, 64, {1, 300, 2, 4, 0, 3, 77, 1}, {400, 20, 1, 129, 50, 1000, 5, 0}, 0, KvCacheDtype::kAuto, 3},
        AbsorbCase{16, 64, {1, 300, 2, 4, 0, 3, 77, 1}, {400, 20, 1, 129, 50, 1000, 5, 0}, 400, KvCacheDtype::kAuto, 3},
        AbsorbCase{128, 64, {1, 64, 4, 2}, {700, 60, 90, 2}, 0, KvCacheDtype::kAuto, 3},
        AbsorbCase{128, 16, {1, 64, 4, 2}, {700, 300, 90, 2}, 200, KvCacheDtype::kAuto, 3},
        // Every request absorbed: the up-projection only writes the cache.
        AbsorbCase{16, 16, {1, 1, 1, 1, 2}, {1, 15, 16, 2000, 33}, 0, KvCacheDtype::kAuto, 5},
        AbsorbCase{16, 64, {1, 40, 3, 2}, {500, 9, 130, 64}, 0, KvCacheDtype::kFp8DsMla, 3}),
    absorb_name);

#if MLAKIT_WITH_CUDA
// A prefill, decode and MTP steps through one CUDA graph of two layers, replayed after
// re-planning: the first step absorbs nothing, later ones absorb some or all requests; every
// replay's gather writes its new tokens and the latent attention reads them back from the cache.
class CudaMlaAbsorbGraph : public ::testing::TestWithParam<bool> {};

TEST_P(CudaMlaAbsorbGraph, PrefillThenDecodeReplaysOneGraph) {
  MLAKIT_SKIP_IF_NO_LATENT_CUDA();
  const int layers = 2;
  const std::vector<int32_t> start{0, 40, 300};
  const std::vector<std::vector<int32_t>> steps{{90, 20, 5}, {1, 1, 1}, {2, 0, 1}, {3, 60, 1}};
  const StepsExtent extent = prefill_steps_extent(start, steps);
  const int64_t bucket = extent.max_new, graph_rows = extent.max_rows;
  MlaConfig cfg;
  cfg.num_heads = 16;
  cfg.block_size = 16;
  cfg.absorb_max_query_len = 3;
  cfg.max_tokens = bucket;
  cfg.max_context_tokens = graph_rows;
  cfg.workspace_rows = graph_rows;
  const std::vector<MlaCase> cases = make_prefill_steps(cfg, start, steps, 97, 0, bucket);
  MlaConfig gcfg = cases[0].cfg;
  gcfg.device = Device::cuda(0);
  gcfg.upload_in_run = GetParam();
  MlaStep step(gcfg);
  MlaPlanOptions opts;
  opts.graph_rows = graph_rows;
  std::vector<std::unique_ptr<DeviceLayer>> dev;
  std::vector<std::unique_ptr<DeviceTensor>> caches;
  for (int l = 0; l < layers; ++l) {
    dev.push_back(std::make_unique<DeviceLayer>(cases[0], gcfg.device));
    caches.push_back(std::make_unique<DeviceTensor>(cases[0].cache, gcfg.device));
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto run_layers = [&] {
    for (int l = 0; l < layers; ++l) {
      TensorView lse = dev[l]->lse->view();
      step.run(layer_over(*dev[l], *caches[l]), dev[l]->out->view(), &lse, stream);
    }
  };
  step.plan(cases[0].batch(), opts, stream);
  run_layers();  // warm-up (one-time kernel setup)
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (int l = 0; l < layers; ++l) upload(cases[0].cache, *caches[l]);
  synchronize(gcfg.device);
  CapturedGraph graph;
  ASSERT_TRUE(graph.capture(stream, [&] { run_layers(); }));

  const std::vector<int> absorbed{0, 3, 2, 2};
  for (size_t s = 0; s < cases.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const MlaCase& m = cases[s];
    for (int l = 0; l < layers; ++l) {
      upload(m.q, *dev[l]->q);
      upload(m.kv_c, *dev[l]->kv_c);
      upload(m.k_pe, *dev[l]->k_pe);
      fill_bytes(dev[l]->out->view().data, gcfg.device, 0xFF, dev[l]->out->view().numel() * 2);
      fill_bytes(dev[l]->lse->view().data, gcfg.device, 0xFF, dev[l]->lse->view().numel() * 4);
    }
    synchronize(gcfg.device);
    step.plan(m.batch(), opts, stream);
    EXPECT_EQ(step.info().absorbed_requests, absorbed[s]);
    ASSERT_EQ(graph.launch(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const MlaRef ref = mla_reference(m);
    const HostTensor want_cache = expected_cache(m);
    for (int l = 0; l < layers; ++l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      Fetched f = fetch(*dev[l], m);
      caches[l]->copy_to(f.cache);
      expect_matches(f, m, ref);
      EXPECT_EQ(f.cache.bytes(), want_cache.bytes()) << "cache after the replay";
    }
  }
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Upload, CudaMlaAbsorbGraph, ::testing::Bool(), [](const ::testing::TestParamInfo<bool>& i) {
  return i.param ? "upload_in_run" : "upload_in_plan";
});
#endif

}  // namespace
}  // namespace test
}  // namespace mlakit
