// The MLA step on FP8 latent caches on CUDA (MlaConfig::kv_cache_dtype: vLLM's fp8 with a
// per-layer scale in device memory, DeepSeek-V3.2's 656-byte fp8_ds_mla rows), what
// tests/cpu/test_mla_step_fp8_cache.cc checks on the CPU:
//   * the step against the float64 reference on the dequantized cache and against the CPU
//     backend (DeepSeek-Coder-V2-Lite's and DeepSeek-V3's head counts, block sizes 1 / 16 / 64,
//     contexts 0 / 1 / odd / past a chunk, context chunks, the seed's 999-token prompt, all-zero
//     latents and outlier channels), outputs NaN-poisoned first; the cache bytes after the step
//     against the formats written down in the tests (util/kv_cache_spec.h);
//   * a prefill over three steps chained through one device cache;
//   * prefill and decode agree (a token's output whether its latent was new or cached);
//   * a NaN latent stays NaN for the queries that see it;
//   * a CUDA graph of two layers captured once and replayed after re-planning, each replay
//     reading the cache earlier replays wrote, with kFp8's scale changed in its device buffer
//     between replays (read when the graph runs), plan uploaded by plan() and by the graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

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

MlaConfig cache_dims(KvCacheDtype f, int heads, int block_size, DType dtype = DType::kBF16) {
  MlaConfig c;
  c.num_heads = heads;
  c.kv_lora_rank = 512;
  c.block_size = block_size;
  c.dtype = dtype;
  c.kv_cache_dtype = f;
  c.absorb_max_query_len = 0;  // the up-projection path; absorbed requests: test_mla_absorb_cuda.cc
  return c;
}

// All-zero latents for new token 2 (amax 0) and three channels 20x the rest (outliers).
void add_zero_row_and_outliers(MlaCase& m) {
  const int64_t L = m.cfg.kv_lora_rank;
  for (int64_t x = 0; x < L; ++x) m.kv_c.set(2 * L + x, 0.0);
  for (int64_t t = 0; t < m.kv_c.shape()[0]; ++t)
    for (int64_t ch : {int64_t{3}, int64_t{200}, L - 2}) m.kv_c.set(t * L + ch, 20.0 * m.kv_c.get(t * L + ch));
}

struct CacheCase {
  const char* name;
  KvCacheDtype format;
  DType dtype;
  int heads, block_size;
  std::vector<int32_t> q, ctx;
  int64_t workspace_rows;  // 0: one launch
  bool special;
};

class CudaMlaStepFp8Cache : public ::testing::TestWithParam<CacheCase> {};

TEST_P(CudaMlaStepFp8Cache, MatchesReferenceAndCpuBackend) {
  MLAKIT_SKIP_IF_NO_GPU();
  const CacheCase& p = GetParam();
  MlaConfig cfg = cache_dims(p.format, p.heads, p.block_size, p.dtype);
  cfg.workspace_rows = p.workspace_rows;
  MlaCase m = make_mla_case(cfg, p.q, p.ctx, 131 + p.heads + p.block_size);
  if (p.special) add_zero_row_and_outliers(m);
  const MlaRef ref = mla_reference(m);

  MlaConfig gcfg = m.cfg;
  gcfg.device = Device::cuda(0);
  MlaStep step(gcfg);
  step.plan(m.batch());
  EXPECT_EQ(step.info().chunked, p.workspace_rows > 0);
  DeviceLayer d(m, gcfg.device);
  TensorView lse = d.lse->view();
  step.run(d.layer(), d.out->view(), &lse);
  synchronize(gcfg.device);
  const Fetched f = fetch(d, m);
  expect_matches(f, m, ref);
  EXPECT_EQ(f.cache.bytes(), expected_cache(m).bytes()) << "the format's bytes at the new tokens' slots";

  // The CPU backend on the same inputs: the same cache bytes, the same results within rounding.
  MlaStep cpu(m.cfg);
  cpu.plan(m.batch());
  HostTensor cpu_out(m.cfg.dtype, {m.q.shape()[0], m.cfg.num_heads, m.cfg.v_head_dim});
  HostTensor cache = m.cache;
  MlaLayer y = m.layer();
  y.kv_cache = cache.view();
  cpu.run(y, cpu_out.view());
  EXPECT_EQ(cache.bytes(), f.cache.bytes());
  std::vector<double> a = f.out.to_doubles(), b = cpu_out.to_doubles();
  const size_t n = static_cast<size_t>(m.total_q() * m.cfg.num_heads * m.cfg.v_head_dim);
  a.resize(n);
  b.resize(n);
  EXPECT_LE(relative_error(a, b), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, CudaMlaStepFp8Cache,
    ::testing::Values(
        CacheCase{"fp8_h16_bs16", KvCacheDtype::kFp8, DType::kBF16, 16, 16, {300, 1, 77, 0, 129}, {0, 1, 37, 300, 200}, 0, false},
        CacheCase{"fp8_h16_bs64_chunked_special", KvCacheDtype::kFp8, DType::kBF16, 16, 64, {200, 64, 3}, {700, 1, 450}, 300, true},
        CacheCase{"fp8_fp16_h16_bs1_special", KvCacheDtype::kFp8, DType::kFP16, 16, 1, {5, 63, 1, 70}, {3, 60, 0, 64}, 0, true},
        CacheCase{"fp8_seed_999", KvCacheDtype::kFp8, DType::kBF16, 16, 16, {999}, {0}, 0, false},
        CacheCase{"ds_mla_h16_bs16", KvCacheDtype::kFp8DsMla, DType::kBF16, 16, 16, {300, 1, 77, 0, 129}, {0, 1, 37, 300, 200}, 0, false},
        CacheCase{"ds_mla_h16_bs64_chunked_special", KvCacheDtype::kFp8DsMla, DType::kBF16, 16, 64, {200, 64, 3}, {700, 1, 450}, 300, true},
        CacheCase{"ds_mla_h16_bs1_special", KvCacheDtype::kFp8DsMla, DType::kBF16, 16, 1, {5, 63, 1, 70}, {3, 60, 0, 64}, 0, true},
        CacheCase{"ds_mla_seed_999", KvCacheDtype::kFp8DsMla, DType::kBF16, 16, 16, {999}, {0}, 0, false},
        CacheCase{"ds_mla_h128_bs64", KvCacheDtype::kFp8DsMla, DType::kBF16, 128, 64, {64, 31}, {60, 0}, 0, false},
        CacheCase{"fp8_h128_bs16_chunked", KvCacheDtype::kFp8, DType::kBF16, 128, 16, {64, 31}, {200, 0}, 100, false}),
    [](const ::testing::TestParamInfo<CacheCase>& i) { return std::string(i.param.name); });

// Three prefill steps of three requests on one device cache (starting contexts 0, shorter and
// longer than a block; a request idle in a step; bucket rows past each step's tokens): each step
// attends what the steps before it wrote, the cache compared with the formats' bytes each time.
const std::vector<int32_t> kStartCtx = {0, 9, 300};
const std::vector<std::vector<int32_t>> kSteps = {{200, 40, 3}, {150, 0, 64}, {1, 77, 10}};

struct StepsParam {
  KvCacheDtype format;
  int block_size;
  int64_t workspace_rows;
};

class CudaMlaStepsFp8Cache : public ::testing::TestWithParam<StepsParam> {};

TEST_P(CudaMlaStepsFp8Cache, LaterStepsReadWhatEarlierStepsWrote) {
  MLAKIT_SKIP_IF_NO_GPU();
  const StepsParam p = GetParam();
  MlaConfig cfg = cache_dims(p.format, 16, p.block_size);
  cfg.workspace_rows = p.workspace_rows;
  const std::vector<MlaCase> cases = make_prefill_steps(cfg, kStartCtx, kSteps, 171 + p.block_size, 9);
  MlaConfig gcfg = cases[0].cfg;
  gcfg.device = Device::cuda(0);
  MlaStep step(gcfg);
  const DeviceTensor cache(cases[0].cache, gcfg.device);
  for (size_t s = 0; s < cases.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const MlaCase& m = cases[s];
    step.plan(m.batch());
    EXPECT_EQ(step.info().chunked, p.workspace_rows > 0);
    DeviceLayer d(m, gcfg.device);
    TensorView lse = d.lse->view();
    step.run(layer_over(d, cache), d.out->view(), &lse);
    synchronize(gcfg.device);
    Fetched f = fetch(d, m);
    cache.copy_to(f.cache);
    expect_matches(f, m, mla_reference(m));
    EXPECT_EQ(f.cache.bytes(), expected_cache(m).bytes()) << "cache after the step";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaMlaStepsFp8Cache,
                         ::testing::Values(StepsParam{KvCacheDtype::kFp8, 16, 0}, StepsParam{KvCacheDtype::kFp8, 64, 300},
                                           StepsParam{KvCacheDtype::kFp8DsMla, 16, 0},
                                           StepsParam{KvCacheDtype::kFp8DsMla, 64, 300}),
                         [](const ::testing::TestParamInfo<StepsParam>& i) {
                           return std::string(kv_cache_dtype_name(i.param.format)) + "_bs" +
                                  std::to_string(i.param.block_size) + "_ws" + std::to_string(i.param.workspace_rows);
                         });

// Runs one layer of `m` on the GPU; returns out (as the step wrote it) and the cache after it.
Fetched run_on_gpu(const MlaCase& m) {
  MlaConfig gcfg = m.cfg;
  gcfg.device = Device::cuda(0);
  MlaStep step(gcfg);
  step.plan(m.batch());
  DeviceLayer d(m, gcfg.device);
  TensorView lse = d.lse->view();
  step.run(d.layer(), d.out->view(), &lse);
  synchronize(gcfg.device);
  return fetch(d, m);
}

TEST(CudaMlaFp8Cache, PrefillAndDecodeAgree) {
  // As on the CPU: the last token of a 300-token prompt, new in the step that writes it, and
  // read from the cache that step wrote: the same output (the step attends new tokens as the
  // cache holds them).
  MLAKIT_SKIP_IF_NO_GPU();
  for (KvCacheDtype f : {KvCacheDtype::kFp8, KvCacheDtype::kFp8DsMla}) {
    SCOPED_TRACE(kv_cache_dtype_name(f));
    const int n = 300;
    const MlaCase a = make_mla_case(cache_dims(f, 16, 16), {n}, {0}, 177);
    const Fetched fa = run_on_gpu(a);
    MlaCase b = a;
    b.cfg.max_context_tokens = n;
    b.q_lens = {1};
    b.ctx_lens = {n - 1};
    b.cache = fa.cache;
    const int64_t L = a.cfg.kv_lora_rank, R = a.cfg.qk_rope_head_dim, dq = a.cfg.qk_nope_head_dim + R;
    const int64_t H = a.cfg.num_heads, w = H * a.cfg.v_head_dim;
    b.q = HostTensor(a.cfg.dtype, {1, H, dq});
    b.kv_c = HostTensor(a.cfg.dtype, {1, L});
    b.k_pe = HostTensor(a.cfg.dtype, {1, R});
    for (int64_t i = 0; i < H * dq; ++i) b.q.set(i, a.q.get((n - 1) * H * dq + i));
    for (int64_t i = 0; i < L; ++i) b.kv_c.set(i, a.kv_c.get((n - 1) * L + i));
    for (int64_t i = 0; i < R; ++i) b.k_pe.set(i, a.k_pe.get((n - 1) * R + i));
    b.slot_mapping = {a.slot_mapping.back()};
    const Fetched fb = run_on_gpu(b);
    EXPECT_EQ(fb.cache.bytes(), fa.cache.bytes());
    const std::vector<double> all_a = fa.out.to_doubles(), all_b = fb.out.to_doubles();
    const std::vector<double> last_a(all_a.begin() + (n - 1) * w, all_a.begin() + n * w),
        only_b(all_b.begin(), all_b.begin() + w);
    const double d = relative_error(only_b, last_a);
    std::printf("[   INFO   ] %s: last token, new vs cached: relative difference %.2e\n", kv_cache_dtype_name(f), d);
    EXPECT_LE(d, 2e-3);
  }
}

TEST(CudaMlaFp8Cache, NanInALatentIsNeverANumber) {
  MLAKIT_SKIP_IF_NO_GPU();
  for (KvCacheDtype f : {KvCacheDtype::kFp8, KvCacheDtype::kFp8DsMla}) {
    SCOPED_TRACE(kv_cache_dtype_name(f));
    MlaCase m = make_mla_case(cache_dims(f, 16, 16), {6, 5}, {10, 3}, 197);
    const int64_t L = m.cfg.kv_lora_rank, w = m.cfg.num_heads * m.cfg.v_head_dim;
    m.kv_c.set(3 * L + 7, std::numeric_limits<double>::quiet_NaN());  // request 0's 4th new token
    const Fetched got = run_on_gpu(m);
    EXPECT_EQ(got.cache.bytes(), expected_cache(m).bytes());
    const MlaRef ref = mla_reference(m);
    const std::vector<double> o = got.out.to_doubles(), want = ref.out.to_doubles();
    for (int64_t i = 3 * w; i < 6 * w; ++i) ASSERT_TRUE(std::isnan(o[static_cast<size_t>(i)])) << i;
    const std::vector<double> other(o.begin() + 6 * w, o.begin() + 11 * w),
        other_ref(want.begin() + 6 * w, want.begin() + 11 * w);
    EXPECT_LE(relative_error(other, other_ref), 1e-2);
  }
}

// A CUDA graph of two layers replayed through the chained prefill: each replay re-planned, its
// inputs written into the captured buffers, the caches never re-uploaded; kFp8's scale changed
// in its device buffer before each replay (so a replay that kept the captured value fails the
// reference, which decodes with the new one).
using GraphParam = std::tuple<KvCacheDtype, bool>;  // format, upload_in_run

class CudaMlaGraphFp8Cache : public ::testing::TestWithParam<GraphParam> {};

TEST_P(CudaMlaGraphFp8Cache, ReplayAfterReplanWithANewScale) {
  MLAKIT_SKIP_IF_NO_GPU();
#if MLAKIT_WITH_CUDA
  const KvCacheDtype f = std::get<0>(GetParam());
  const int layers = 2;
  int64_t bucket = 0, graph_rows = 0;
  {
    std::vector<int32_t> ctx = kStartCtx;
    for (const auto& q : kSteps) {
      int64_t tq = 0, rows = 0;
      for (size_t r = 0; r < q.size(); ++r) {
        tq += q[r];
        rows += ctx[r] + q[r];
        ctx[r] += q[r];
      }
      bucket = std::max(bucket, tq);
      graph_rows = std::max(graph_rows, rows);
    }
  }
  MlaConfig cfg = cache_dims(f, 16, 16);
  cfg.max_tokens = bucket;
  cfg.max_context_tokens = graph_rows;
  cfg.workspace_rows = graph_rows;
  std::vector<MlaCase> cases = make_prefill_steps(cfg, kStartCtx, kSteps, 283, 0, bucket);
  if (f == KvCacheDtype::kFp8) set_scale_per_step(cases, {0.0173, 0.0411, 0.0097});
  MlaConfig gcfg = cases[0].cfg;
  gcfg.device = Device::cuda(0);
  gcfg.upload_in_run = std::get<1>(GetParam());
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
  run_layers();  // one-time kernel setup outside the capture
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (int l = 0; l < layers; ++l) upload(cases[0].cache, *caches[l]);
  synchronize(gcfg.device);
  CapturedGraph graph;
  ASSERT_TRUE(graph.capture(stream, [&] { run_layers(); }));

  for (size_t s = 0; s < cases.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const MlaCase& m = cases[s];
    for (int l = 0; l < layers; ++l) {
      upload(m.q, *dev[l]->q);
      upload(m.kv_c, *dev[l]->kv_c);
      upload(m.k_pe, *dev[l]->k_pe);
      if (dev[l]->k_scale) upload(m.k_scale, *dev[l]->k_scale);
      fill_bytes(dev[l]->out->view().data, gcfg.device, 0xFF, dev[l]->out->view().numel() * 2);
      fill_bytes(dev[l]->lse->view().data, gcfg.device, 0xFF, dev[l]->lse->view().numel() * 4);
    }
    synchronize(gcfg.device);
    step.plan(m.batch(), opts, stream);
    ASSERT_EQ(graph.launch(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const MlaRef ref = mla_reference(m);
    const HostTensor want_cache = expected_cache(m);
    for (int l = 0; l < layers; ++l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      Fetched fl = fetch(*dev[l], m);
      caches[l]->copy_to(fl.cache);
      expect_matches(fl, m, ref);
      EXPECT_EQ(fl.cache.bytes(), want_cache.bytes()) << "cache after the replay";
    }
  }
  cudaStreamDestroy(stream);
#endif
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaMlaGraphFp8Cache,
                         ::testing::Combine(::testing::Values(KvCacheDtype::kFp8, KvCacheDtype::kFp8DsMla),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<GraphParam>& i) {
                           return std::string(kv_cache_dtype_name(std::get<0>(i.param))) +
                                  (std::get<1>(i.param) ? "_upload_in_run" : "_upload_in_plan");
                         });

}  // namespace
}  // namespace test
}  // namespace mlakit
