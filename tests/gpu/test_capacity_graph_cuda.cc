// The engine pattern on the GPU: one CUDA graph captured over capacity-sized buffers (whole
// buffers, not views sliced to the batch), LSE written head-major ([H, T], FlashAttention's
// layout) through a strided view, then re-plan with other lengths and replay; and the same
// batches run eagerly (the sm90 kernel then uses the tensor maps as encoded from the whole
// buffers instead of rewriting their extents to the plan's totals). Rows past each batch hold NaN
// in q/k/v (a result that let them through would be NaN) and poison in out/lse (a kernel that
// wrote them is caught).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

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

constexpr int kHeads = 4, kDqk = 192, kDvo = 128;
constexpr int64_t kCapQ = 1400, kCapKV = 2400;

void nan_from_row(HostTensor& t, int64_t row) {
  const int64_t per_row = t.numel() / t.shape()[0];
  for (int64_t i = row * per_row; i < t.numel(); ++i) t.set(i, std::nan(""));
}

// Each kernel, selected explicitly.
class CudaGraphCapacity : public ::testing::TestWithParam<KernelPreference> {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_KERNEL_UNAVAILABLE(GetParam(), kDqk, kDvo, DType::kBF16); }
};

void run_capacity_batches(KernelPreference kernel, bool use_graph) {
#if MLAKIT_WITH_CUDA
  std::mt19937_64 rng(std::random_device{}());
  const DType t = DType::kBF16;
  const Device dev = Device::cuda(0);
  HostTensor q(t, {kCapQ, kHeads, kDqk}), k(t, {kCapKV, kHeads, kDqk}), v(t, {kCapKV, kHeads, kDvo});
  HostTensor out(t, {kCapQ, kHeads, kDvo}), lse_ht(DType::kFP32, {kHeads, kCapQ});
  DeviceTensor dq(q, dev), dk(k, dev), dv(v, dev), dout(out, dev), dlse(lse_ht, dev);
  // [T, H] view of the [H, T] buffer: what flash_attn_varlen_func returns as softmax_lse.
  TensorView lse_view(dlse.view().data, DType::kFP32, {kCapQ, kHeads}, {1, kCapQ}, dev);

  RaggedPrefill prefill(cuda_config(kHeads, kHeads, kDqk, kDvo, t, 8, kCapQ, kCapKV, kernel));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  PrefillOptions opts;
  opts.causal = true;

  // New inputs for a batch: random rows, NaN past the batch, uploaded into the same buffers.
  auto load = [&](int64_t tq, int64_t tk) {
    for (HostTensor* x : {&q, &k, &v}) x->fill_normal(rng);
    nan_from_row(q, tq);
    nan_from_row(k, tk);
    nan_from_row(v, tk);
    copy_bytes(dq.view().data, dev, q.data(), Device::cpu(), q.nbytes(), stream);
    copy_bytes(dk.view().data, dev, k.data(), Device::cpu(), k.nbytes(), stream);
    copy_bytes(dv.view().data, dev, v.data(), Device::cpu(), v.nbytes(), stream);
    fill_bytes(dout.view().data, dev, 0xFF, out.nbytes(), stream);
    fill_bytes(dlse.view().data, dev, 0xFF, lse_ht.nbytes(), stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  };

  CapturedGraph graph;
  if (use_graph) {
    const std::vector<int32_t> qo_a = make_indptr({300, 1, 129}), kv_a = make_indptr({300, 64, 129});
    load(qo_a.back(), kv_a.back());
    prefill.plan(qo_a.data(), kv_a.data(), 3, opts, stream);
    ASSERT_TRUE(graph.capture(stream, [&] {
      prefill.run(dq.view(), dk.view(), dv.view(), dout.view(), &lse_view, stream);
    }));
  }

  const std::vector<std::vector<int32_t>> q_sets = {
      {300, 1, 129}, {999, 200, 0, 77, 3}, {17}, {128, 128, 128, 128, 128, 128, 128, 128}};
  const std::vector<std::vector<int32_t>> kv_sets = {
      {300, 64, 129}, {999, 1200, 5, 77, 100}, {2000}, {128, 256, 128, 300, 128, 129, 128, 131}};
  for (size_t s = 0; s < q_sets.size(); ++s) {
    SCOPED_TRACE((use_graph ? "replay " : "eager run ") + std::to_string(s));
    const std::vector<int32_t> qo = make_indptr(q_sets[s]), kv = make_indptr(kv_sets[s]);
    const int batch = static_cast<int>(q_sets[s].size());
    const int64_t tq = qo.back(), tk = kv.back();
    if (s > 0 || !use_graph) load(tq, tk);
    prefill.plan(qo.data(), kv.data(), batch, opts, stream);
    if (use_graph) {
      ASSERT_EQ(graph.launch(stream), cudaSuccess);
    } else {
      prefill.run(dq.view(), dk.view(), dv.view(), dout.view(), &lse_view, stream);
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    dout.copy_to(out);
    dlse.copy_to(lse_ht);

    // The reference reads the same capacity-sized host buffers (rows past the batch are NaN).
    HostTensor ref(DType::kFP64, {tq, kHeads, kDvo}), ref_lse(DType::kFP64, {tq, kHeads});
    TensorView rl = ref_lse.view();
    reference::ragged_prefill(q.view(), k.view(), v.view(), qo.data(), kv.data(), batch, opts, ref.view(), &rl);
    std::vector<double> got = out.to_doubles();
    got.resize(static_cast<size_t>(tq) * kHeads * kDvo);
    EXPECT_LE(relative_error(got, ref.to_doubles()), 1e-2);
    double lse_err = 0;
    int64_t lse_bad = 0;
    for (int64_t r = 0; r < tq; ++r) {
      for (int h = 0; h < kHeads; ++h) {
        const double g = lse_ht.get(h * kCapQ + r), w = ref_lse.get(r * kHeads + h);
        if (std::isinf(w)) lse_bad += (g == w) ? 0 : 1;
        else if (std::isnan(g)) ++lse_bad;
        else lse_err = std::max(lse_err, std::fabs(g - w));
      }
    }
    EXPECT_EQ(lse_bad, 0);
    EXPECT_LE(lse_err, 2e-2);
    // Nothing written past the batch: out rows and lse columns >= tq still hold 0xFF bytes.
    const size_t out_row_bytes = out.nbytes() / kCapQ;
    int64_t out_written = 0, lse_written = 0;
    for (size_t i = static_cast<size_t>(tq) * out_row_bytes; i < out.nbytes(); ++i)
      out_written += out.bytes()[i] != 0xFF;
    for (int h = 0; h < kHeads; ++h)
      for (int64_t r = tq; r < kCapQ; ++r) {
        uint32_t bits;
        std::memcpy(&bits, static_cast<const float*>(lse_ht.data()) + h * kCapQ + r, 4);
        lse_written += bits != 0xFFFFFFFFu;
      }
    EXPECT_EQ(out_written, 0) << "bytes of out written past total_q";
    EXPECT_EQ(lse_written, 0) << "lse entries written past total_q";
  }
  cudaStreamDestroy(stream);
#else
  (void)kernel;
  (void)use_graph;
#endif
}

TEST_P(CudaGraphCapacity, WholeBuffersHeadMajorLseReplanReplay) { run_capacity_batches(GetParam(), true); }

TEST_P(CudaGraphCapacity, WholeBuffersHeadMajorLseEager) { run_capacity_batches(GetParam(), false); }

INSTANTIATE_TEST_SUITE_P(Kernels, CudaGraphCapacity, ::testing::ValuesIn(kAllKernels),
                         kernel_param_name);

}  // namespace
}  // namespace test
}  // namespace mlakit
