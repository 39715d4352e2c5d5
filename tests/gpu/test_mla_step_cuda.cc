// The MLA step on CUDA: against the float64 reference and the CPU backend (DeepSeek-Coder-V2-Lite
// and DeepSeek-V3 head counts, block sizes 16 and 64, shuffled blocks, contexts 0 / 1 / shorter
// than a block / not a block multiple / larger than the workspace chunk, the seed's 999-token
// prompt), the cache write (fused into the first launch's gather) and its round trip, a prefill
// over several steps on one cache (eager and through one CUDA graph replayed after re-planning,
// each step attending what the previous replays wrote), chunk-size independence, an lse written
// through a transposed view ([H, rows] memory), and CUDA-graph capture of a layer loop, replayed
// after re-planning (on sm90+ its attention -> next gather edges are programmatic: PDL,
// docs/sm90-kernel.md). Outputs are NaN-poisoned before every run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gpu/gpu_case.h"
#include "gpu/mla_device_layer.h"
#include "mlakit/mlakit.h"
#include "util/mla_case.h"
#include "util/mla_steps.h"
#include "util/test_util.h"

#if MLAKIT_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/common/pdl_launch.h"
#include "gpu/captured_graph.h"
#endif

namespace mlakit {
namespace test {
namespace {

// Every request up-projects here (chunks and graph rows count every context; the CPU backend
// compared against runs the same path); absorbed requests: test_mla_absorb_cuda.cc.
MlaConfig dims(int heads, int block_size, int lora = 512) {
  MlaConfig c;
  c.num_heads = heads;
  c.kv_lora_rank = lora;
  c.block_size = block_size;
  c.dtype = DType::kBF16;
  c.absorb_max_query_len = 0;
  return c;
}

struct GpuMlaCase {
  int heads, block_size;
  std::vector<int32_t> q, ctx;
  int64_t workspace_rows;  // 0 = one launch
};

// Each case against each attention kernel, selected explicitly.
using GpuMlaParam = std::tuple<GpuMlaCase, KernelPreference>;

std::string name_of(const ::testing::TestParamInfo<GpuMlaParam>& i) {
  const GpuMlaCase& c = std::get<0>(i.param);
  return std::string(kernel_preference_name(std::get<1>(i.param))) + "_h" + std::to_string(c.heads) + "_bs" +
         std::to_string(c.block_size) + "_ws" + std::to_string(c.workspace_rows) + "_" + std::to_string(i.index);
}

class CudaMlaStep : public ::testing::TestWithParam<GpuMlaParam> {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_KERNEL_UNAVAILABLE(std::get<1>(GetParam()), 192, 128, DType::kBF16); }
};

TEST_P(CudaMlaStep, MatchesReferenceAndCpuBackend) {
  const GpuMlaCase gc = std::get<0>(GetParam());
  MlaConfig cfg = dims(gc.heads, gc.block_size);
  cfg.workspace_rows = gc.workspace_rows;
  const MlaCase m = make_mla_case(cfg, gc.q, gc.ctx, 31 + gc.heads + gc.block_size);
  const MlaRef ref = mla_reference(m);

  MlaConfig gcfg = m.cfg;
  gcfg.device = Device::cuda(0);
  gcfg.kernel = std::get<1>(GetParam());
  MlaStep step(gcfg);
  step.plan(m.batch());
  EXPECT_EQ(step.info().chunked, gc.workspace_rows > 0);
  DeviceLayer d(m, gcfg.device);
  TensorView lse = d.lse->view();
  step.run(d.layer(), d.out->view(), &lse);
  synchronize(gcfg.device);
  const Fetched f = fetch(d, m);
  expect_matches(f, m, ref);
  EXPECT_EQ(f.cache.bytes(), expected_cache(m).bytes()) << "cache write/read round trip";

  // The CPU backend on the same inputs agrees within rounding (different GEMMs, same step).
  MlaStep cpu(m.cfg);
  cpu.plan(m.batch());
  HostTensor cpu_out(m.cfg.dtype, {m.q.shape()[0], m.cfg.num_heads, m.cfg.v_head_dim});
  HostTensor cache = m.cache;
  MlaLayer y = m.layer();
  y.kv_cache = cache.view();
  cpu.run(y, cpu_out.view());
  std::vector<double> a = f.out.to_doubles(), b = cpu_out.to_doubles();
  const size_t n = static_cast<size_t>(m.total_q() * m.cfg.num_heads * m.cfg.v_head_dim);
  a.resize(n);
  b.resize(n);
  EXPECT_LE(relative_error(a, b), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaMlaStep,
    ::testing::Combine(::testing::Values(
        // DeepSeek-Coder-V2-Lite: 16 heads. Contexts 0, 1, not a block multiple, several blocks.
        GpuMlaCase{16, 16, {300, 1, 77, 0, 129}, {0, 1, 37, 300, 200}, 0},
        GpuMlaCase{16, 64, {300, 1, 77, 0, 129}, {0, 1, 37, 300, 200}, 0},
        // The seed's request (context 0: the fused gather only copies kv_c / k_pe and writes the
        // cache), and contexts shorter than a block next to new tokens in the same block.
        GpuMlaCase{16, 16, {999}, {0}, 0},
        GpuMlaCase{16, 64, {5, 63, 1, 70}, {3, 60, 0, 64}, 0},
        GpuMlaCase{16, 64, {5, 63, 1, 70}, {3, 60, 0, 64}, 160},
        // Context larger than the workspace: chunks merged by LSE.
        GpuMlaCase{16, 16, {200, 64, 3}, {700, 1, 450}, 512},
        GpuMlaCase{16, 64, {200, 64, 3}, {700, 1, 450}, 300},
        // DeepSeek-V3: 128 heads.
        GpuMlaCase{128, 64, {64, 31}, {60, 0}, 0},
        GpuMlaCase{128, 16, {64, 31}, {200, 0}, 100}),
                       ::testing::ValuesIn(kAllKernels)),
    name_of);

struct StepsParam {
  int block_size;
  int64_t workspace_rows;       // 0: one launch per step
  bool upload_in_run = false;   // MlaConfig::upload_in_run, eager: the first run() uploads the plan
};

std::string steps_name(const ::testing::TestParamInfo<StepsParam>& i) {
  return "bs" + std::to_string(i.param.block_size) + "_ws" + std::to_string(i.param.workspace_rows) +
         (i.param.upload_in_run ? "_upload_in_run" : "");
}

// Three prefill steps of three requests on one device cache: starting contexts 0, shorter and
// longer than a block; a request idle in a step; bucket rows past each step's tokens. Each step
// attends what the steps before it wrote (a missing or misplaced write fails the next step), and
// the cache is compared with the expected one after every step (padding rows never written).
const std::vector<int32_t> kStartCtx = {0, 9, 300};
const std::vector<std::vector<int32_t>> kSteps = {{200, 40, 3}, {150, 0, 64}, {1, 77, 10}};

class CudaMlaSteps : public ::testing::TestWithParam<StepsParam> {};

TEST_P(CudaMlaSteps, LaterStepsReadWhatEarlierStepsWrote) {
  MLAKIT_SKIP_IF_NO_GPU();
  const StepsParam p = GetParam();
  MlaConfig cfg = dims(16, p.block_size);
  cfg.workspace_rows = p.workspace_rows;
  const std::vector<MlaCase> cases = make_prefill_steps(cfg, kStartCtx, kSteps, 71 + p.block_size, 9);
  MlaConfig gcfg = cases[0].cfg;
  gcfg.device = Device::cuda(0);
  gcfg.upload_in_run = p.upload_in_run;
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

INSTANTIATE_TEST_SUITE_P(Layouts, CudaMlaSteps,
                         ::testing::Values(StepsParam{16, 0}, StepsParam{64, 0}, StepsParam{16, 256},
                                           StepsParam{64, 300}, StepsParam{16, 0, true},
                                           StepsParam{64, 300, true}),
                         steps_name);

TEST(CudaMlaChunks, ChunkSizeIndependence) {
  MLAKIT_SKIP_IF_NO_GPU();
  const MlaCase m = make_mla_case(dims(16, 16), {128, 5, 40}, {900, 33, 300}, 41);
  const MlaRef ref = mla_reference(m);
  std::vector<double> first;
  for (int64_t rows : {int64_t{0}, int64_t{173}, int64_t{256}, int64_t{1000}}) {
    SCOPED_TRACE("workspace_rows " + std::to_string(rows));
    MlaConfig cfg = m.cfg;
    cfg.device = Device::cuda(0);
    cfg.workspace_rows = rows;
    MlaStep step(cfg);
    step.plan(m.batch());
    DeviceLayer d(m, cfg.device);
    TensorView lse = d.lse->view();
    step.run(d.layer(), d.out->view(), &lse);
    synchronize(cfg.device);
    const Fetched f = fetch(d, m);
    expect_matches(f, m, ref);
    std::vector<double> o = f.out.to_doubles();
    if (first.empty()) first = o;
    else EXPECT_LE(relative_error(o, first), 1e-2);
  }
}

TEST(CudaMlaLse, HeadMajorBufferThroughATransposedView) {
  // lse as an [H, rows] buffer (FlashAttention's layout) seen as [rows, H] with strides (1, rows):
  // the attention launch and the LSE merge of context chunks write it through both strides; the
  // values equal those written into a contiguous [rows, H] lse.
  MLAKIT_SKIP_IF_NO_GPU();
  const MlaCase m = make_mla_case(dims(16, 16), {70, 5}, {300, 2}, 43);
  const int64_t rows = m.q.shape()[0], H = m.cfg.num_heads;
  for (int64_t workspace_rows : {int64_t{0}, int64_t{128}}) {
    SCOPED_TRACE("workspace_rows " + std::to_string(workspace_rows));
    MlaConfig cfg = m.cfg;
    cfg.device = Device::cuda(0);
    cfg.workspace_rows = workspace_rows;
    MlaStep step(cfg);
    step.plan(m.batch());
    EXPECT_EQ(step.info().chunked, workspace_rows > 0);
    DeviceLayer d(m, cfg.device);
    TensorView lse = d.lse->view();
    step.run(d.layer(), d.out->view(), &lse);
    HostTensor poison(DType::kFP32, {H, rows});
    poison.fill_bytes(0xFF);
    DeviceTensor lse_ht(poison, cfg.device);
    const TensorView lse_t(lse_ht.view().data, DType::kFP32, {rows, H}, {1, rows}, cfg.device);
    DeviceLayer d2(m, cfg.device);
    step.run(d2.layer(), d2.out->view(), &lse_t);
    synchronize(cfg.device);
    const Fetched want = fetch(d, m), got = fetch(d2, m);
    HostTensor ht(DType::kFP32, {H, rows});
    lse_ht.copy_to(ht);
    EXPECT_EQ(got.out.bytes(), want.out.bytes());
    for (int64_t t = 0; t < m.total_q(); ++t) {
      for (int64_t h = 0; h < H; ++h) ASSERT_EQ(ht.get(h * rows + t), want.lse.get(t * H + h)) << t << "," << h;
    }
  }
}

#if MLAKIT_WITH_CUDA
// A step's inputs (and a fresh cache) into a layer's device buffers, outputs NaN-poisoned.
void load_layer(const MlaCase& m, const DeviceLayer& d) {
  upload(m.q, *d.q);
  upload(m.kv_c, *d.kv_c);
  upload(m.k_pe, *d.k_pe);
  upload(m.w, *d.w);
  upload(m.cache, *d.cache);
  const Device dev = d.out->view().device;
  fill_bytes(d.out->view().data, dev, 0xFF, d.out->view().numel() * 2);
  fill_bytes(d.lse->view().data, dev, 0xFF, d.lse->view().numel() * 4);
}

// The bucket-graph tests' step: one token bucket (256 new tokens, 512 rows of context + new) for
// every step, planned with graph_rows = 512.
constexpr int64_t kBucket = 256, kGraphRows = 512;

MlaConfig bucket_config(bool upload_in_run) {
  MlaConfig cfg = dims(16, 16);
  cfg.device = Device::cuda(0);
  cfg.upload_in_run = upload_in_run;
  cfg.max_batch = 8;
  cfg.max_tokens = kBucket;
  cfg.max_context_tokens = kGraphRows;
  cfg.workspace_rows = kGraphRows;
  cfg.num_blocks = 200;
  return cfg;
}

// A case of `cfg`'s step with these lengths, its q/kv_c/k_pe padded to the bucket's rows (built
// on the CPU, for the reference).
MlaCase bucket_case(const MlaConfig& cfg, const std::vector<int32_t>& q, const std::vector<int32_t>& ctx,
                    uint64_t seed) {
  int64_t tq = 0;
  for (int32_t x : q) tq += x;
  MlaConfig c = cfg;
  c.device = Device::cpu();
  return make_mla_case(c, q, ctx, seed, 0, static_cast<int>(kBucket - tq));
}

// Every layer of a replayed step against the reference: all layers share the step's block table
// (cases[0]'s, as planned), each its own cache.
void expect_step_layers(std::vector<MlaCase>& cases, const std::vector<std::unique_ptr<DeviceLayer>>& dev) {
  for (size_t l = 0; l < cases.size(); ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    MlaCase& m = cases[l];
    m.block_table = cases[0].block_table;
    m.slot_mapping = cases[0].slot_mapping;
    const Fetched f = fetch(*dev[l], m);
    expect_matches(f, m, mla_reference(m));
    EXPECT_EQ(f.cache.bytes(), expected_cache(m).bytes());
  }
}

// The layers of a bucket-graph test: each layer's case for step s (from case_for) and one set of
// device buffers per layer, allocated once at step 0's case and reloaded in place for later steps,
// so a captured graph keeps reading and writing the same addresses.
struct BucketLayers {
  std::function<MlaCase(size_t, int)> case_for;
  std::vector<MlaCase> cases;
  std::vector<std::unique_ptr<DeviceLayer>> dev;

  BucketLayers(int layers, Device d, std::function<MlaCase(size_t, int)> f) : case_for(std::move(f)) {
    for (int l = 0; l < layers; ++l) {
      cases.push_back(case_for(0, l));
      dev.push_back(std::make_unique<DeviceLayer>(cases.back(), d));
    }
  }
  // Every layer once on `stream`, under the step's plan in force.
  void run(const MlaStep& step, cudaStream_t stream) const {
    for (const auto& d : dev) {
      TensorView lse = d->lse->view();
      step.run(d->layer(), d->out->view(), &lse, stream);
    }
  }
  // Step s's inputs into the same buffers; returns once they are on the device.
  void load_step(size_t s, Device d) {
    for (size_t l = 0; l < dev.size(); ++l) {
      cases[l] = case_for(s, static_cast<int>(l));
      load_layer(cases[l], *dev[l]);
    }
    synchronize(d);
  }
};

// Programmatic (PDL) edges in a captured graph; -1 when this toolkit cannot tell.
int programmatic_edges(cudaGraph_t g) {
#if CUDART_VERSION >= 12030
  size_t n = 0;
#if CUDART_VERSION >= 13000
  auto get_edges = [&](cudaGraphNode_t* from, cudaGraphNode_t* to, cudaGraphEdgeData* data) {
    return cudaGraphGetEdges(g, from, to, data, &n);
  };
#else
  auto get_edges = [&](cudaGraphNode_t* from, cudaGraphNode_t* to, cudaGraphEdgeData* data) {
    return cudaGraphGetEdges_v2(g, from, to, data, &n);
  };
#endif
  if (get_edges(nullptr, nullptr, nullptr) != cudaSuccess) return -1;
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (get_edges(from.data(), to.data(), data.data()) != cudaSuccess) return -1;
  int programmatic = 0;
  for (const cudaGraphEdgeData& e : data) programmatic += e.type == cudaGraphDependencyTypeProgrammatic ? 1 : 0;
  return programmatic;
#else
  (void)g;
  return -1;
#endif
}

// docs/sm90-kernel.md: on sm90+ (unless switched off) each layer's attention -> the next layer's gather
// is a programmatic edge; on older GPUs, or with MLAKIT_DISABLE_PDL=1, there is none.
void expect_pdl_edges(cudaGraph_t g, int at_least) {
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  const int n = programmatic_edges(g);
  if (n < 0) return;
  if (cuda::pdl_switched_on() && major >= 9) {
    EXPECT_GE(n, at_least) << "launches on sm90+ should be captured as programmatic (PDL) edges";
  } else {
    EXPECT_EQ(n, 0) << "PDL is off (build, MLAKIT_DISABLE_PDL or compute capability < 9.0)";
  }
}
#endif

// The graph tests run with the plan uploaded by plan() and by the step's first run()
// (MlaConfig::upload_in_run: then the capture holds the upload as its first node).
class CudaMlaGraph : public ::testing::TestWithParam<bool> {};

TEST_P(CudaMlaGraph, CaptureLayerLoopThenReplanAndReplay) {
  MLAKIT_SKIP_IF_NO_GPU();
#if MLAKIT_WITH_CUDA
  // Three steps through one bucket graph of 3 layers.
  const int layers = 3;
  const MlaConfig cfg = bucket_config(GetParam());
  const std::vector<std::vector<int32_t>> q_sets = {{150, 1, 60}, {256}, {7, 100, 0, 90, 50}};
  const std::vector<std::vector<int32_t>> ctx_sets = {{0, 17, 100}, {250}, {1, 0, 33, 64, 150}};
  // Device buffers at the bucket size, one set per layer, allocated once.
  BucketLayers b(layers, cfg.device, [&](size_t s, int layer) {
    return bucket_case(cfg, q_sets[s], ctx_sets[s], 1000 * s + layer);
  });
  MlaStep step(cfg);
  MlaPlanOptions opts;
  opts.graph_rows = kGraphRows;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  step.plan(b.cases[0].batch(), opts, stream);
  ASSERT_EQ(step.info().launch_rows, kGraphRows);

  // Warm-up run (kernels' one-time attribute setup), then restore the caches and capture.
  b.run(step, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  CapturedGraph graph;
  ASSERT_TRUE(graph.capture(stream, [&] { b.run(step, stream); }));
  expect_pdl_edges(graph.graph(), layers - 1);

  for (size_t s = 0; s < q_sets.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    b.load_step(s, cfg.device);
    step.plan(b.cases[0].batch(), opts, stream);  // every layer shares the step's block table
    ASSERT_EQ(graph.launch(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    expect_step_layers(b.cases, b.dev);
  }
  cudaStreamDestroy(stream);
#endif
}

TEST_P(CudaMlaGraph, ReplayedStepsChainThroughTheCache) {
  MLAKIT_SKIP_IF_NO_GPU();
#if MLAKIT_WITH_CUDA
  // The prefill of CudaMlaSteps through one captured graph of two layers: every step re-plans
  // (new lengths, new gather map, new slots) and replays, the caches are never re-uploaded, so
  // each replay's fused gather must read the context that earlier replays wrote and write its
  // own new tokens, never a bucket row.
  const int layers = 2;
  const StepsExtent extent = prefill_steps_extent(kStartCtx, kSteps);
  const int64_t bucket = extent.max_new, graph_rows = extent.max_rows;
  MlaConfig cfg = dims(16, 16);
  cfg.max_tokens = bucket;
  cfg.max_context_tokens = graph_rows;
  cfg.workspace_rows = graph_rows;
  const std::vector<MlaCase> cases = make_prefill_steps(cfg, kStartCtx, kSteps, 83, 0, bucket);
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
  // Warm-up (one-time kernel setup), then the caches as they were, then the capture.
  step.plan(cases[0].batch(), opts, stream);
  run_layers();
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
      fill_bytes(dev[l]->out->view().data, gcfg.device, 0xFF, dev[l]->out->view().numel() * 2);
      fill_bytes(dev[l]->lse->view().data, gcfg.device, 0xFF, dev[l]->lse->view().numel() * 4);
    }
    synchronize(gcfg.device);
    step.plan(m.batch(), opts, stream);
    ASSERT_EQ(step.info().launch_rows, graph_rows);
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
#endif
}

#if MLAKIT_WITH_CUDA
void CUDART_CB hold_stream(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }
#endif

TEST_P(CudaMlaGraph, PlanWhileAReplayIsQueued) {
  MLAKIT_SKIP_IF_NO_GPU();
#if MLAKIT_WITH_CUDA
  // An engine plans step s+1 while step s's replay may still be queued. The queued replay must
  // run under the plan in force at its launch: plan() must overwrite neither what that replay
  // will upload (upload_in_run: plan() waits for the replay's upload) nor the device workspace
  // before the replay has run (the copy is stream-ordered). A host function holds the stream for
  // 100 ms, so the replay is still queued when the next plan() comes.
  const MlaConfig cfg = bucket_config(GetParam());
  const MlaCase a = bucket_case(cfg, {150, 1, 60}, {0, 17, 100}, 500);
  const MlaCase b = bucket_case(cfg, {7, 100, 0, 90, 50}, {1, 0, 33, 64, 150}, 501);
  DeviceLayer dev(a, cfg.device);
  MlaStep step(cfg);
  MlaPlanOptions opts;
  opts.graph_rows = kGraphRows;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto run_layer = [&] {
    TensorView lse = dev.lse->view();
    step.run(dev.layer(), dev.out->view(), &lse, stream);
  };
  step.plan(b.batch(), opts, stream);  // warm-up and capture under another plan than the replays'
  run_layer();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  CapturedGraph graph;
  ASSERT_TRUE(graph.capture(stream, [&] { run_layer(); }));

  auto load = [&](const MlaCase& m) {
    load_layer(m, dev);
    synchronize(cfg.device);
  };
  load(a);
  step.plan(a.batch(), opts, stream);
  ASSERT_EQ(cudaLaunchHostFunc(stream, hold_stream, nullptr), cudaSuccess);
  ASSERT_EQ(graph.launch(stream), cudaSuccess);
  step.plan(b.batch(), opts, stream);  // the replay above has not started yet
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  {
    SCOPED_TRACE("the queued replay, under the plan in force at its launch");
    expect_matches(fetch(dev, a), a, mla_reference(a));
  }
  load(b);
  ASSERT_EQ(graph.launch(stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  {
    SCOPED_TRACE("the next replay, under the plan made while the first was queued");
    expect_matches(fetch(dev, b), b, mla_reference(b));
  }
  cudaStreamDestroy(stream);
#endif
}

TEST_P(CudaMlaGraph, StreamGraphPlansAndReplays) {
  MLAKIT_SKIP_IF_NO_GPU();
#if MLAKIT_WITH_CUDA
  // mlakit::StreamGraph (include/mlakit/graph.h) instead of the raw CUDA graph calls: a two-layer
  // loop captured once, replayed after each re-plan, the caller's launch refused before a capture.
  const int layers = 2;
  const MlaConfig cfg = bucket_config(GetParam());
  const std::vector<std::vector<int32_t>> q_sets = {{256}, {7, 100, 0, 90, 50}};
  const std::vector<std::vector<int32_t>> ctx_sets = {{250}, {1, 0, 33, 64, 150}};
  BucketLayers b(layers, cfg.device, [&](size_t s, int layer) {
    return bucket_case(cfg, q_sets[s], ctx_sets[s], 700 + 10 * s + layer);
  });
  MlaStep step(cfg);
  MlaPlanOptions opts;
  opts.graph_rows = kGraphRows;
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  StreamGraph graph(cfg.device);
  EXPECT_FALSE(graph.captured());
  EXPECT_TRUE(throws_error([&] { graph.launch(stream); }, ErrorKind::kInvalidArgument, "graph"));
  EXPECT_TRUE(throws_error([&] { graph.begin_capture(nullptr); }, ErrorKind::kInvalidArgument, "stream"));
  step.plan(b.cases[0].batch(), opts, stream);
  b.run(step, stream);  // one-time kernel setup outside the capture
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  graph.begin_capture(stream);
  b.run(step, stream);
  graph.end_capture();
  EXPECT_TRUE(graph.captured());
  for (size_t s = 0; s < q_sets.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    b.load_step(s, cfg.device);
    step.plan(b.cases[0].batch(), opts, stream);
    graph.launch(stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    expect_step_layers(b.cases, b.dev);
  }
  cudaStreamDestroy(stream);
#endif
}

TEST(CudaStreamGraph, DestroyedMidCaptureLeavesTheStreamUsable) {
  MLAKIT_SKIP_IF_NO_GPU();
#if MLAKIT_WITH_CUDA
  // A StreamGraph destroyed between begin_capture and end_capture (an exception unwinding past
  // it) must end the capture: the stream then runs work again and no CUDA error is left pending.
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  void* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 256), cudaSuccess);
  {
    StreamGraph g(Device::cuda(0));
    g.begin_capture(stream);
    EXPECT_TRUE(throws_error([&] { g.begin_capture(stream); }, ErrorKind::kInvalidArgument, "stream"));
    ASSERT_EQ(cudaMemsetAsync(buf, 0, 256, stream), cudaSuccess);  // recorded, not run
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  ASSERT_EQ(cudaStreamIsCapturing(stream, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(buf, 7, 256, stream), cudaSuccess);
  uint8_t host[256] = {};
  ASSERT_EQ(cudaMemcpyAsync(host, buf, 256, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(host[0], 7);
  EXPECT_EQ(host[255], 7);
  cudaFree(buf);
  cudaStreamDestroy(stream);
#endif
}

INSTANTIATE_TEST_SUITE_P(Upload, CudaMlaGraph, ::testing::Bool(), [](const ::testing::TestParamInfo<bool>& i) {
  return std::string(i.param ? "upload_in_run" : "upload_in_plan");
});

}  // namespace
}  // namespace test
}  // namespace mlakit
