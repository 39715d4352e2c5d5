// The MLA step for DeepSeek-V3.2 on CUDA (MlaPlanOptions::topk): tokens past top-k attend through
// the indexer's indices in latent space (the Hopper latent kernel's sparse mode), the others
// densely; against the float64 oracle of tests/util/mla_sparse_case.h (repeats, -1, entries past
// the request's keys, topk_length), with the cache written, at 16 and 128 heads, on the 16-bit and
// fp8_ds_mla caches (their rows decoded in the kernel, or once into a workspace), eager and
// through a CUDA graph replayed after re-planning. Outputs are NaN-poisoned before every run.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_case.h"
#include "gpu/latent_device_case.h"
#include "gpu/mla_device_layer.h"
#include "mlakit/mlakit.h"
#include "util/mla_case.h"
#include "util/mla_sparse_case.h"
#include "util/mla_steps.h"
#include "util/test_util.h"

#if MLAKIT_WITH_CUDA
#include <cuda_runtime.h>

#include "gpu/captured_graph.h"
#endif

namespace mlakit {
namespace test {
namespace {

constexpr int kTopk = 64;

struct SparseCase {
  int heads, block_size;
  KvCacheDtype format;
  std::vector<int32_t> q, ctx;
  int64_t sparse_tokens;
  int64_t decoded_rows = 0;  // MlaConfig::max_decoded_rows (FP8 caches)
};

std::string sparse_name(const ::testing::TestParamInfo<SparseCase>& i) {
  return "h" + std::to_string(i.param.heads) + "_bs" + std::to_string(i.param.block_size) + "_" +
         kv_cache_dtype_name(i.param.format) + (i.param.decoded_rows > 0 ? "_decoded" : "");
}

class CudaMlaSparseStep : public ::testing::TestWithParam<SparseCase> {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_NO_LATENT_CUDA(); }
};

MlaConfig sparse_config(const SparseCase& sc) {
  MlaConfig c;
  c.num_heads = sc.heads;
  c.block_size = sc.block_size;
  c.kv_cache_dtype = sc.format;
  c.max_topk = kTopk;
  c.max_decoded_rows = sc.decoded_rows;
  return c;
}

TEST_P(CudaMlaSparseStep, MatchesTheOracle) {
  const SparseCase sc = GetParam();
  const MlaCase m = make_mla_case(sparse_config(sc), sc.q, sc.ctx, 40 + sc.heads);
  const SparseInputs s = make_indices(m, kTopk, 3);
  MlaConfig gcfg = m.cfg;
  gcfg.device = Device::cuda(0);
  MlaStep step(gcfg);
  MlaPlanOptions o;
  o.topk = kTopk;
  step.plan(m.batch(), o);
  EXPECT_EQ(step.info().sparse_tokens, sc.sparse_tokens);
  DeviceLayer d(m, gcfg.device);
  DeviceTensor idx(s.indices, gcfg.device), len(s.topk_length, gcfg.device);
  MlaLayer y = d.layer();
  const TensorView iv = idx.view(), lv = len.view();
  y.indices = &iv;
  y.topk_length = &lv;
  TensorView lse_view = d.lse->view();
  step.run(y, d.out->view(), &lse_view);
  synchronize(gcfg.device);
  const Fetched f = fetch(d, m);
  const Oracle want = sparse_oracle(m, kTopk, s);
  expect_step_rows(f.out, f.lse, m, want.out, want.lse);
  EXPECT_EQ(f.cache.bytes(), expected_cache(m).bytes());
}

INSTANTIATE_TEST_SUITE_P(
    Steps, CudaMlaSparseStep,
    ::testing::Values(
        // A prompt straddling top-k, a decode and an MTP past it, a request below it, an extend
        // straddling it.
        SparseCase{16, 64, KvCacheDtype::kAuto, {100, 1, 3, 20, 30}, {0, 200, 70, 10, 50}, 36 + 1 + 3 + 16},
        SparseCase{16, 16, KvCacheDtype::kAuto, {100, 1, 3, 20, 30}, {0, 200, 70, 10, 50}, 36 + 1 + 3 + 16},
        SparseCase{128, 64, KvCacheDtype::kAuto, {80, 2}, {0, 100}, 16 + 2},
        SparseCase{16, 64, KvCacheDtype::kFp8DsMla, {100, 1, 3}, {0, 200, 70}, 36 + 1 + 3},
        // The sparse tokens' rows decoded once (2 x 48 tokens x 64 entries read 640 rows).
        SparseCase{128, 16, KvCacheDtype::kFp8DsMla, {80, 2, 30}, {0, 100, 300}, 16 + 2 + 30, 4096}),
    sparse_name);

#if MLAKIT_WITH_CUDA
// Two steps of one V3.2 prefill through one captured graph (sized by graph_rows and
// graph_absorbed_tokens), replayed after re-planning: a prompt chunk straddling top-k beside an
// extend past it, then an MTP step of each request, which reads what the first wrote; every
// replay's indices copied by the graph from the same buffer.
TEST(CudaMlaSparseGraph, ReplaysAfterReplanning) {
  MLAKIT_SKIP_IF_NO_LATENT_CUDA();
  MlaConfig cfg;
  cfg.num_heads = 16;
  cfg.block_size = 64;
  cfg.max_topk = kTopk;
  cfg.max_tokens = 120;
  cfg.max_context_tokens = 300;
  cfg.num_blocks = 16;
  // One prefill over two steps (one block table, weight and cache; 120 q rows each).
  const std::vector<MlaCase> cases = make_prefill_steps(cfg, {0, 150}, {{100, 20}, {2, 3}}, 70, 0, /*bucket_rows=*/120);
  MlaConfig gcfg = cases[0].cfg;
  gcfg.device = Device::cuda(0);
  MlaStep step(gcfg);
  MlaPlanOptions o;
  o.topk = kTopk;
  o.graph_rows = 400;
  o.graph_absorbed_tokens = 80;
  DeviceLayer d(cases[0], gcfg.device);
  HostTensor idx_h(DType::kInt32, {120, kTopk}), len_h(DType::kInt32, {120});
  DeviceTensor idx(idx_h, gcfg.device), len(len_h, gcfg.device);
  const TensorView iv = idx.view(), lv = len.view();
  MlaLayer y = d.layer();
  y.indices = &iv;
  y.topk_length = &lv;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  TensorView lse = d.lse->view();
  step.plan(cases[0].batch(), o, stream);
  step.run(y, d.out->view(), &lse, stream);  // one-time kernel setup
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  CapturedGraph graph;
  ASSERT_TRUE(graph.capture(stream, [&] { step.run(y, d.out->view(), &lse, stream); }));
  upload(cases[0].cache, *d.cache);  // then never reset: step 1 reads what step 0 wrote
  for (size_t s = 0; s < cases.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const MlaCase& m = cases[s];
    const SparseInputs in = make_indices(m, kTopk, 11 + s);
    upload(m.q, *d.q);
    upload(m.kv_c, *d.kv_c);
    upload(m.k_pe, *d.k_pe);
    upload(in.indices, idx);
    upload(in.topk_length, len);
    fill_bytes(d.out->view().data, gcfg.device, 0xFF, d.out->view().numel() * 2);
    fill_bytes(d.lse->view().data, gcfg.device, 0xFF, d.lse->view().numel() * 4);
    synchronize(gcfg.device);
    step.plan(m.batch(), o, stream);
    ASSERT_GT(step.info().sparse_tokens, 0);
    ASSERT_EQ(graph.launch(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    Fetched f = fetch(d, m);
    const Oracle want = sparse_oracle(m, kTopk, in);
    std::vector<double> out = f.out.to_doubles();
    out.resize(static_cast<size_t>(m.total_q() * m.cfg.num_heads * m.cfg.v_head_dim));
    int64_t nan = 0;
    for (double x : out) nan += std::isnan(x) ? 1 : 0;
    EXPECT_EQ(nan, 0);
    EXPECT_LE(relative_error(out, want.out), 1e-2);
    EXPECT_EQ(f.cache.bytes(), expected_cache(m).bytes());
  }
  cudaStreamDestroy(stream);
}
#endif

}  // namespace
}  // namespace test
}  // namespace mlakit
