// CUDA-graph capture of run() followed by re-planning and replay, plan reuse across layers,
// and merge_states on the GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gpu/gpu_case.h"
#include "mlakit/mlakit.h"
#include "util/test_util.h"

#if MLAKIT_WITH_CUDA
#include <cuda_runtime.h>

#include "gpu/captured_graph.h"
#endif

namespace mlakit {
namespace test {
namespace {

TensorView first_rows(TensorView v, int64_t rows) {
  v.shape[0] = rows;
  return v;
}

struct Buffers {
  HostTensor q, k, v;
  Buffers(DType t, int64_t max_q, int64_t max_kv, int h, int hkv, int dqk, int dvo,
          std::mt19937_64& rng)
      : q(t, {max_q, h, dqk}), k(t, {max_kv, hkv, dqk}), v(t, {max_kv, hkv, dvo}) {
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
  }
};

// Compares rows [0, total_q) of a device output with the reference for this batch.
void expect_matches_reference(const Buffers& b, const std::vector<int32_t>& qo,
                              const std::vector<int32_t>& kv, const PrefillOptions& opts,
                              const DeviceTensor& dout, int h, int dvo, DType t) {
  const int batch = static_cast<int>(qo.size()) - 1;
  const int64_t tq = qo.back(), tk = kv.back();
  HostTensor ref(DType::kFP64, {tq, h, dvo});
  reference::ragged_prefill(first_rows(b.q.view(), tq), first_rows(b.k.view(), tk),
                            first_rows(b.v.view(), tk), qo.data(), kv.data(), batch, opts,
                            ref.view(), nullptr);
  HostTensor full(t, {dout.view().shape[0], h, dvo});
  dout.copy_to(full);
  std::vector<double> got = full.to_doubles();
  got.resize(static_cast<size_t>(tq * h * dvo));
  int64_t nan = 0;
  for (double x : got) nan += std::isnan(x) ? 1 : 0;
  EXPECT_EQ(nan, 0);
  EXPECT_LE(relative_error(got, ref.to_doubles()), 1e-2);
}

// Each kernel, selected explicitly (the sm90 one rewrites its TMA extents from the replayed plan).
class CudaGraph : public ::testing::TestWithParam<KernelPreference> {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_KERNEL_UNAVAILABLE(GetParam(), 192, 128, DType::kBF16); }
};

TEST_P(CudaGraph, CaptureThenReplanAndReplay) {
#if MLAKIT_WITH_CUDA
  std::mt19937_64 rng(std::random_device{}());
  const int h = 4, dqk = 192, dvo = 128;
  const DType t = DType::kBF16;
  const int64_t max_q = 1400, max_kv = 2400;
  Buffers b(t, max_q, max_kv, h, h, dqk, dvo, rng);
  const Device dev = Device::cuda(0);
  DeviceTensor dq(b.q, dev), dk(b.k, dev), dv(b.v, dev);
  HostTensor out_init(t, {max_q, h, dvo});
  out_init.fill_bytes(0xFF);
  DeviceTensor dout(out_init, dev);

  RaggedPrefill prefill(cuda_config(h, h, dqk, dvo, t, 8, max_q, max_kv, GetParam()));

  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  PrefillOptions opts;
  opts.causal = true;

  // Plan A, capture one run into a graph.
  const std::vector<int32_t> qo_a = make_indptr({300, 1, 129});
  const std::vector<int32_t> kv_a = make_indptr({300, 64, 129});
  prefill.plan(qo_a.data(), kv_a.data(), 3, opts, stream);
  CapturedGraph graph;
  ASSERT_TRUE(graph.capture(stream, [&] {
    prefill.run(first_rows(dq.view(), qo_a.back()), first_rows(dk.view(), kv_a.back()),
                first_rows(dv.view(), kv_a.back()), first_rows(dout.view(), qo_a.back()), nullptr,
                stream);
  }));

  ASSERT_EQ(graph.launch(stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  expect_matches_reference(b, qo_a, kv_a, opts, dout, h, dvo, t);

  // Re-plan with other lengths (more sequences, more tokens), poison, replay the same graph.
  const std::vector<std::vector<int32_t>> q_sets = {{999, 200, 0, 77, 3}, {17}, {128, 128, 128, 128, 128, 128, 128, 128}};
  const std::vector<std::vector<int32_t>> kv_sets = {{999, 1200, 5, 77, 100}, {2000}, {128, 256, 128, 300, 128, 129, 128, 131}};
  for (size_t s = 0; s < q_sets.size(); ++s) {
    const std::vector<int32_t> qo = make_indptr(q_sets[s]);
    const std::vector<int32_t> kv = make_indptr(kv_sets[s]);
    prefill.plan(qo.data(), kv.data(), static_cast<int>(q_sets[s].size()), opts, stream);
    fill_bytes(dout.view().data, dev, 0xFF, out_init.nbytes(), stream);
    ASSERT_EQ(graph.launch(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    SCOPED_TRACE("replay after re-plan " + std::to_string(s));
    expect_matches_reference(b, qo, kv, opts, dout, h, dvo, t);
  }
  cudaStreamDestroy(stream);
#endif
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaGraph, ::testing::ValuesIn(kAllKernels),
                         kernel_param_name);

TEST(CudaPlanReuse, OnePlanManyLayers) {
  MLAKIT_SKIP_IF_NO_GPU();
  std::mt19937_64 rng(std::random_device{}());
  const int h = 4, dqk = 192, dvo = 128;
  const std::vector<int32_t> qo = make_indptr({260, 33, 1});
  const std::vector<int32_t> kv = make_indptr({400, 33, 90});
  PrefillConfig cfg;
  cfg.num_qo_heads = h;
  cfg.num_kv_heads = h;
  cfg.dtype = DType::kFP16;
  cfg.max_batch = 3;
  cfg.max_q_tokens = qo.back();
  cfg.max_kv_tokens = kv.back();
  cfg.device = Device::cuda(0);
  RaggedPrefill prefill(cfg);
  PrefillOptions opts;
  opts.causal = true;
  prefill.plan(qo.data(), kv.data(), 3, opts);
  for (int layer = 0; layer < 3; ++layer) {
    Buffers b(DType::kFP16, qo.back(), kv.back(), h, h, dqk, dvo, rng);
    DeviceTensor dq(b.q, cfg.device), dk(b.k, cfg.device), dv(b.v, cfg.device);
    HostTensor o(DType::kFP16, {qo.back(), h, dvo});
    o.fill_bytes(0xFF);
    DeviceTensor dout(o, cfg.device);
    prefill.run(dq.view(), dk.view(), dv.view(), dout.view());
    SCOPED_TRACE("layer " + std::to_string(layer));
    expect_matches_reference(b, qo, kv, opts, dout, h, dvo, DType::kFP16);
  }
}

class CudaMerge : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_NO_GPU(); }
};

TEST_P(CudaMerge, MatchesReferenceWithInfinities) {
  const DType t = GetParam();
  std::mt19937_64 rng(std::random_device{}());
  const int64_t n = 257, h = 3, d = 128;
  HostTensor oa(t, {n, h, d}), ob(t, {n, h, d}), la(DType::kFP32, {n, h}), lb(DType::kFP32, {n, h});
  oa.fill_normal(rng);
  ob.fill_normal(rng);
  la.fill_normal(rng, 3.0);
  lb.fill_normal(rng, 3.0);
  // Rows 0..2: a empty, b empty, both empty.
  for (int64_t j = 0; j < h; ++j) {
    la.set(0 * h + j, -INFINITY);
    lb.set(1 * h + j, -INFINITY);
    la.set(2 * h + j, -INFINITY);
    lb.set(2 * h + j, -INFINITY);
  }
  HostTensor ref(DType::kFP64, {n, h, d}), ref_lse(DType::kFP64, {n, h});
  TensorView ref_lse_v = ref_lse.view();
  reference::merge_states(oa.view(), la.view(), ob.view(), lb.view(), ref.view(), &ref_lse_v);

  const Device dev = Device::cuda(0);
  DeviceTensor da(oa, dev), db(ob, dev), dla(la, dev), dlb(lb, dev);
  HostTensor o(t, {n, h, d}), lo(DType::kFP32, {n, h});
  o.fill_bytes(0xFF);
  lo.fill_bytes(0xFF);
  DeviceTensor dout(o, dev), dlo(lo, dev);
  TensorView lo_v = dlo.view();
  merge_states(da.view(), dla.view(), db.view(), dlb.view(), dout.view(), &lo_v);
  synchronize(dev);
  dout.copy_to(o);
  dlo.copy_to(lo);
  EXPECT_LE(relative_error(o, ref), t == DType::kFP32 ? 1e-6 : 1e-2);
  for (int64_t i = 0; i < n * h; ++i) {
    const double want = ref_lse.get(i), got = lo.get(i);
    ASSERT_FALSE(std::isnan(got)) << i;
    if (std::isinf(want)) {
      EXPECT_EQ(got, want) << i;
    } else {
      EXPECT_NEAR(got, want, 1e-5 * (1 + std::fabs(want))) << i;
    }
  }
  // One side empty passes the other through bit for bit; both empty gives exact zeros.
  for (int64_t j = 0; j < h * d; ++j) {
    EXPECT_EQ(o.get(0 * h * d + j), ob.get(0 * h * d + j));
    EXPECT_EQ(o.get(1 * h * d + j), oa.get(1 * h * d + j));
    EXPECT_EQ(o.get(2 * h * d + j), 0.0);
  }

  // In place: out aliases out_a, lse_out aliases lse_a.
  TensorView la_v = dla.view();
  merge_states(da.view(), dla.view(), db.view(), dlb.view(), da.view(), &la_v);
  synchronize(dev);
  HostTensor o2(t, {n, h, d});
  da.copy_to(o2);
  EXPECT_EQ(o2.bytes(), o.bytes());
}

INSTANTIATE_TEST_SUITE_P(Types, CudaMerge,
                         ::testing::Values(DType::kBF16, DType::kFP16, DType::kFP32),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

}  // namespace
}  // namespace test
}  // namespace mlakit
