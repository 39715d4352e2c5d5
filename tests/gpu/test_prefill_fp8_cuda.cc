// The FP8 (e4m3 -> bf16) sm90 kernel beyond the shared cases of test_prefill_cuda.cc (which run
// it on every case with exactly representable probabilities): random and outlier-channel inputs
// quantized as an engine would (the FP8 issue's 3e-2 against the reference on the dequantized
// inputs), no descales, a CUDA graph replayed after re-planning with new descale values in the
// same buffers, capacity-sized buffers holding NaN past the batch and inside an unread
// neighbour's rows, bitwise batch invariance (split and unsplit), split K, a long sequence.
// Outputs are poisoned before each run and checked fully written. Each test skips with a printed
// reason when no Hopper GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_case.h"
#include "mlakit/mlakit.h"
#include "util/split_k_case.h"
#include "util/test_util.h"

#if MLAKIT_WITH_CUDA
#include <cuda_runtime.h>

#include "gpu/captured_graph.h"
#endif

namespace mlakit {
namespace test {
namespace {

constexpr KernelPreference kSm90 = KernelPreference::kSm90;

void expect_ok(const GpuCase& c, const CaseResult& r) {
  std::printf("[   CASE   ] %s: relerr %.3e lse_abs %.3e lse_scaled %.3e\n", describe(c).c_str(), r.out_relerr,
              r.lse_max_abs_err, r.lse_max_scaled_err);
  EXPECT_EQ(r.unwritten_or_nan, 0) << describe(c);
  EXPECT_EQ(r.empty_rows_wrong, 0) << describe(c);
  EXPECT_EQ(r.pad_written, 0) << describe(c);
  EXPECT_LE(r.out_relerr, tolerance_for(c)) << describe(c) << "; " << r.worst;
  if (c.fp8 == Fp8Inputs::kOutliers) {
    // Scores of outlier channels are sums of terms up to ~|q||k| (hundreds of nats here), which
    // the e4m3 products accumulate in the tensor cores' 13-bit-mantissa format, truncated: the
    // LSE's error scales with that bound (0.30-0.60 nats here on the H100 against 2e-2's
    // absolute test; docs/fp8.md). 1e-2 of the bound still fails an LSE offset by a constant such
    // as P's 2^8 (8 ln 2 = 5.5 nats).
    EXPECT_LE(r.lse_max_scaled_err, 1e-2) << describe(c) << "; " << r.worst;
  } else {
    EXPECT_LE(r.lse_max_abs_err, 2e-2) << describe(c) << "; " << r.worst;
  }
}

// (Dqk, Dvo) of the e4m3 kernels.
class CudaFp8 : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_KERNEL_UNAVAILABLE(kSm90, GetParam(), 128, DType::kE4M3); }
  GpuCase base(uint64_t seed, Fp8Inputs in) const {
    GpuCase c;
    c.dqk = GetParam();
    c.dtype = DType::kE4M3;
    c.kernel = kSm90;
    c.fp8 = in;
    c.seed = seed;
    return c;
  }
};

// The accuracy the FP8 issue states: random and outlier-channel inputs, quantized per (sequence,
// kv head), against the float64 reference on the dequantized inputs; ragged, causal and not, GQA.
TEST_P(CudaFp8, RandomAndOutlierInputsWithinThreePercent) {
  std::mt19937_64 rng(std::random_device{}());
  for (Fp8Inputs in : {Fp8Inputs::kNormal, Fp8Inputs::kOutliers}) {
    for (bool causal : {false, true}) {
      GpuCase c = base(rng(), in);
      c.heads = 8;
      c.kv_heads = 2;
      c.q_lens = {0, 1, 7, 129, 300, 1000};
      c.kv_lens = {5, 1, 7, 129, 700, 1000};
      c.opts.causal = causal;
      expect_ok(c, run_gpu_case(c));
    }
  }
}

TEST_P(CudaFp8, WithoutDescales) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c = base(rng(), Fp8Inputs::kExactP);
  c.descales = false;
  c.q_lens = {130, 1, 64};
  c.kv_lens = {200, 1, 300};
  c.opts.causal = true;
  expect_ok(c, run_gpu_case(c));
  c.fp8 = Fp8Inputs::kNormal;
  c.seed = rng();
  expect_ok(c, run_gpu_case(c));
}

TEST_P(CudaFp8, LongCausalSequence) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c = base(rng(), Fp8Inputs::kExactP);
  c.heads = c.kv_heads = 2;
  c.q_lens = {3000, 517};
  c.kv_lens = {4100, 517};
  c.opts.causal = true;
  expect_ok(c, run_gpu_case(c));
}

// V and K rows of a sequence no q row reads hold NaN (e4m3 0x7f); the sequence before it ends
// inside a kv tile, so its last tile's V stage holds them: the transpose must zero them (P is 0
// there, 0 x NaN is NaN). Rows past the batch hold NaN too (capacity-sized buffers).
TEST_P(CudaFp8, NanInRowsPastEachSequenceNeverReachesAResult) {
  const int dqk = GetParam(), h = 4;
  const std::vector<int32_t> q_lens = {100, 0, 50, 1}, kv_lens = {100, 60, 80, 3};
  const std::vector<int32_t> qo = make_indptr(q_lens), kv = make_indptr(kv_lens);
  const int64_t extra = 37, tq = qo.back() + extra, tk = kv.back() + extra;
  std::mt19937_64 rng(std::random_device{}());
  HostTensor q(DType::kE4M3, {tq, h, dqk}), k(DType::kE4M3, {tk, h, dqk}), v(DType::kE4M3, {tk, h, 128});
  q.fill_normal(rng);
  k.fill_normal(rng);
  v.fill_normal(rng);
  auto nan_rows = [](HostTensor& t, int64_t r0, int64_t r1) {
    const int64_t per = t.numel() / t.shape()[0];
    for (int64_t i = r0 * per; i < r1 * per; ++i) t.set(i, std::nan(""));
  };
  nan_rows(k, kv[1], kv[2]);
  nan_rows(v, kv[1], kv[2]);
  nan_rows(q, qo.back(), tq);
  nan_rows(k, kv.back(), tk);
  nan_rows(v, kv.back(), tk);
  for (bool causal : {false, true}) {
    PrefillOptions o;
    o.causal = causal;
    HostTensor ref(DType::kFP64, {qo.back(), h, 128});
    auto rows = [](TensorView t, int64_t n) {
      t.shape[0] = n;
      return t;
    };
    reference::ragged_prefill(rows(q.view(), qo.back()), rows(k.view(), kv.back()), rows(v.view(), kv.back()),
                              qo.data(), kv.data(), 4, o, ref.view(), nullptr);
    const Device dev = Device::cuda(0);
    DeviceTensor dq(q, dev), dk(k, dev), dv(v, dev);
    HostTensor out(DType::kBF16, {tq, h, 128});
    out.fill_bytes(0xFF);
    DeviceTensor dout(out, dev);
    RaggedPrefill p(cuda_config(h, h, dqk, 128, DType::kE4M3, 4, tq, tk, kSm90));
    p.plan(qo.data(), kv.data(), 4, o);
    p.run(dq.view(), dk.view(), dv.view(), dout.view());
    dout.copy_to(out);
    std::vector<double> got = out.to_doubles();
    int64_t nan_in = 0, written_past = 0;
    for (int64_t i = 0; i < qo.back() * h * 128; ++i) nan_in += std::isnan(got[static_cast<size_t>(i)]) ? 1 : 0;
    for (size_t i = static_cast<size_t>(qo.back()) * h * 128 * 2; i < out.nbytes(); ++i)
      written_past += out.bytes()[i] != 0xFF;
    got.resize(static_cast<size_t>(qo.back()) * h * 128);
    EXPECT_EQ(nan_in, 0) << "causal " << causal;
    EXPECT_EQ(written_past, 0) << "bytes written past total_q";
    EXPECT_LE(relative_error(got, ref.to_doubles()), 3e-2) << "causal " << causal;
  }
}

// One CUDA graph captured over capacity-sized buffers and descale buffers of max_batch rows,
// replayed after re-planning with other lengths and new descale values written into the same
// buffers: each replay reads the plan and the descales in force.
TEST_P(CudaFp8, GraphReplayAfterReplanReadsNewDescales) {
#if MLAKIT_WITH_CUDA
  const int dqk = GetParam(), h = 4, hkv = 2, max_batch = 8;
  const int64_t cap_q = 1400, cap_kv = 2400;
  std::mt19937_64 rng(std::random_device{}());
  const Device dev = Device::cuda(0);
  HostTensor q(DType::kE4M3, {cap_q, h, dqk}), k(DType::kE4M3, {cap_kv, hkv, dqk}), v(DType::kE4M3, {cap_kv, hkv, 128});
  HostTensor qd(DType::kFP32, {max_batch, hkv}), kd(DType::kFP32, {max_batch, hkv}), vd(DType::kFP32, {max_batch, hkv});
  HostTensor out(DType::kBF16, {cap_q, h, 128}), lse(DType::kFP32, {cap_q, h});
  DeviceTensor dq(q, dev), dk(k, dev), dv(v, dev), dqd(qd, dev), dkd(kd, dev), dvd(vd, dev), dout(out, dev),
      dlse(lse, dev);
  TensorView qdv = dqd.view(), kdv = dkd.view(), vdv = dvd.view(), lv = dlse.view();
  const Descales dd{&qdv, &kdv, &vdv};
  RaggedPrefill prefill(cuda_config(h, hkv, dqk, 128, DType::kE4M3, max_batch, cap_q, cap_kv, kSm90));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  PrefillOptions opts;
  opts.causal = true;
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  auto load = [&] {
    q.fill_normal(rng);
    k.fill_normal(rng);
    v.fill_normal(rng);
    for (HostTensor* d : {&qd, &kd, &vd})
      for (int64_t i = 0; i < d->numel(); ++i) d->set(i, std::exp2(u(rng)));
    const std::pair<HostTensor*, DeviceTensor*> pairs[] = {{&q, &dq}, {&k, &dk}, {&v, &dv}, {&qd, &dqd}, {&kd, &dkd},
                                                           {&vd, &dvd}};
    for (const auto& [hst, d] : pairs) copy_bytes(d->view().data, dev, hst->data(), Device::cpu(), hst->nbytes(), stream);
    fill_bytes(dout.view().data, dev, 0xFF, out.nbytes(), stream);
    fill_bytes(dlse.view().data, dev, 0xFF, lse.nbytes(), stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  };
  const std::vector<std::vector<int32_t>> q_sets = {
      {300, 1, 129}, {999, 200, 0, 77, 3}, {17}, {128, 128, 128, 128, 128, 128, 128, 128}};
  const std::vector<std::vector<int32_t>> kv_sets = {
      {300, 64, 129}, {999, 1200, 5, 77, 100}, {2000}, {128, 256, 128, 300, 128, 129, 128, 131}};
  CapturedGraph graph;
  for (size_t s = 0; s < q_sets.size(); ++s) {
    SCOPED_TRACE("plan " + std::to_string(s));
    const std::vector<int32_t> qo = make_indptr(q_sets[s]), kv = make_indptr(kv_sets[s]);
    const int batch = static_cast<int>(q_sets[s].size());
    load();
    prefill.plan(qo.data(), kv.data(), batch, opts, stream);
    if (s == 0) {
      ASSERT_TRUE(graph.capture(stream, [&] {
        prefill.run(dq.view(), dk.view(), dv.view(), dout.view(), &lv, dd, stream);
      }));
    }
    ASSERT_EQ(graph.launch(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    dout.copy_to(out);
    dlse.copy_to(lse);
    const int64_t tq = qo.back();
    HostTensor ref(DType::kFP64, {tq, h, 128}), ref_lse(DType::kFP64, {tq, h});
    TensorView rl = ref_lse.view(), hq = qd.view(), hk = kd.view(), hv = vd.view();
    reference::ragged_prefill(q.view(), k.view(), v.view(), qo.data(), kv.data(), batch, opts, ref.view(), &rl,
                              Descales{&hq, &hk, &hv});
    std::vector<double> got = out.to_doubles();
    int64_t nan = 0;
    for (int64_t i = 0; i < tq * h * 128; ++i) nan += std::isnan(got[static_cast<size_t>(i)]) ? 1 : 0;
    got.resize(static_cast<size_t>(tq) * h * 128);
    const double err = relative_error(got, ref.to_doubles());
    std::printf("[   CASE   ] e4m3 d%d graph replay %zu: relerr %.3e\n", dqk, s, err);
    EXPECT_EQ(nan, 0);
    EXPECT_LE(err, 3e-2);
    double lse_err = 0;
    for (int64_t i = 0; i < tq * h; ++i) {
      const double g = lse.get(i), w = ref_lse.get(i);
      if (std::isinf(w)) EXPECT_EQ(g, w);
      else lse_err = std::max(lse_err, std::fabs(g - w));
    }
    EXPECT_LE(lse_err, 2e-2);
    int64_t written_past = 0;
    for (size_t i = static_cast<size_t>(tq) * h * 128 * 2; i < out.nbytes(); ++i) written_past += out.bytes()[i] != 0xFF;
    EXPECT_EQ(written_past, 0);
  }
  cudaStreamDestroy(stream);
#endif
}

// A probe sequence's output is bitwise the same alone and inside any batch, with key-range
// splitting on and off (the descales of its batch row travel with it).
TEST_P(CudaFp8, BatchInvariantBitwise) {
  const int dqk = GetParam(), h = 4;
  std::mt19937_64 rng(std::random_device{}());
  const int lq = 999, lk = 1100;
  HostTensor pq(DType::kE4M3, {lq, h, dqk}), pk(DType::kE4M3, {lk, h, dqk}), pv(DType::kE4M3, {lk, h, 128});
  pq.fill_normal(rng);
  pk.fill_normal(rng);
  pv.fill_normal(rng);
  const float pd[3] = {0.75f, 1.25f, 0.5f};  // the probe's q / k / v descales
  struct Placed {
    std::vector<int32_t> q, kv;
    int index;
  };
  const std::vector<Placed> batches = {
      {{lq}, {lk}, 0}, {{5, lq, 3000, 129}, {5, lk, 3000, 200}, 1}, {{1, 1, 1, 1, 1, 1, 1, lq}, {1, 2, 3, 4, 5, 6, 7, lk}, 7}};
  for (KvSplitMode split : {KvSplitMode::kOn, KvSplitMode::kOff}) {
    std::vector<uint8_t> alone;
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      const Placed& b = batches[bi];
      const std::vector<int32_t> qo = make_indptr(b.q), kv = make_indptr(b.kv);
      const int batch = static_cast<int>(b.q.size());
      HostTensor q(DType::kE4M3, {qo.back(), h, dqk}), k(DType::kE4M3, {kv.back(), h, dqk}),
          v(DType::kE4M3, {kv.back(), h, 128});
      q.fill_normal(rng);
      k.fill_normal(rng);
      v.fill_normal(rng);
      auto place = [](HostTensor& dst, const HostTensor& src, int64_t row0) {
        const size_t row_bytes = src.nbytes() / static_cast<size_t>(src.shape()[0]);
        std::memcpy(static_cast<uint8_t*>(dst.data()) + row0 * row_bytes, src.data(), src.nbytes());
      };
      place(q, pq, qo[b.index]);
      place(k, pk, kv[b.index]);
      place(v, pv, kv[b.index]);
      HostTensor d[3] = {HostTensor(DType::kFP32, {batch, h}), HostTensor(DType::kFP32, {batch, h}),
                         HostTensor(DType::kFP32, {batch, h})};
      for (int i = 0; i < 3; ++i) {
        d[i].fill_normal(rng, 0.1, 1.0);
        for (int hh = 0; hh < h; ++hh) d[i].set(b.index * h + hh, pd[i]);
      }
      const Device dev = Device::cuda(0);
      DeviceTensor dq(q, dev), dk(k, dev), dv(v, dev), dqd(d[0], dev), dkd(d[1], dev), dvd(d[2], dev);
      HostTensor out(DType::kBF16, {qo.back(), h, 128});
      out.fill_bytes(0xFF);
      DeviceTensor dout(out, dev);
      PrefillConfig cfg = cuda_config(h, h, dqk, 128, DType::kE4M3, batch, qo.back(), kv.back(), kSm90);
      cfg.kv_split = split;
      RaggedPrefill p(cfg);
      PrefillOptions o;
      o.causal = true;
      p.plan(qo.data(), kv.data(), batch, o);
      if (bi == 0 && split == KvSplitMode::kOn) EXPECT_GT(p.info().split_slots, 0) << "the probe alone splits";
      TensorView a = dqd.view(), bb = dkd.view(), c = dvd.view();
      p.run(dq.view(), dk.view(), dv.view(), dout.view(), nullptr, Descales{&a, &bb, &c});
      dout.copy_to(out);
      const size_t row_bytes = out.nbytes() / static_cast<size_t>(qo.back());
      const uint8_t* first = out.bytes().data() + qo[b.index] * row_bytes;
      std::vector<uint8_t> got(first, first + static_cast<size_t>(lq) * row_bytes);
      if (bi == 0) {
        alone = got;
      } else {
        EXPECT_EQ(got, alone) << "probe differs inside batch " << bi << ", kv_split " << kv_split_mode_name(split);
      }
    }
  }
}

// K in two parts as MLA keeps it (per-head nope part, one RoPE row shared by every head inside a
// latent row): bitwise equal to the concatenated K, and the reference.
TEST_P(CudaFp8, SplitKEqualsConcatenatedK) {
  const int dqk = GetParam(), dn = dqk - 64, rope = 64;
  const SplitKProblem p = make_split_k_problem(DType::kE4M3, 16, 16, dn, rope, 128, 512 + rope, {300, 1, 0, 129, 64},
                                               {300, 77, 5, 400, 64}, 21);
  const Device dev = Device::cuda(0);
  PrefillConfig cfg = cuda_config(16, 16, dqk, 128, DType::kE4M3, p.batch(), p.qo.back(), p.kv.back(), kSm90);
  RaggedPrefill attn(cfg);
  PrefillOptions o;
  o.causal = true;
  attn.plan(p.qo.data(), p.kv.data(), p.batch(), o);
  const int64_t tq = p.qo.back();
  HostTensor d(DType::kFP32, {p.batch(), 16});
  std::mt19937_64 rng(5);
  d.fill_normal(rng, 0.2, 1.0);
  DeviceTensor dq(p.q, dev), dkv(p.kv_buf, dev), dlat(p.latent, dev), dk(p.k_full, dev), dv(p.v, dev), dd(d, dev);
  HostTensor poison(DType::kBF16, {tq, 16, 128});
  poison.fill_bytes(0xFF);
  DeviceTensor dout_split(poison, dev), dout_plain(poison, dev);
  TensorView ddv = dd.view();
  const Descales ds{&ddv, &ddv, &ddv};
  attn.run_split_k(dq.view(), k_part(dkv.view(), dn), rope_part(dlat.view(), rope), v_part(dkv.view(), dn, 128),
                   dout_split.view(), nullptr, ds);
  attn.run(dq.view(), dk.view(), dv.view(), dout_plain.view(), nullptr, ds);
  synchronize(dev);
  HostTensor out_split(DType::kBF16, {tq, 16, 128}), out_plain(DType::kBF16, {tq, 16, 128});
  dout_split.copy_to(out_split);
  dout_plain.copy_to(out_plain);
  int64_t nan = 0;
  for (int64_t i = 0; i < out_split.numel(); ++i) nan += std::isnan(out_split.get(i)) ? 1 : 0;
  EXPECT_EQ(nan, 0);
  EXPECT_EQ(out_split.bytes(), out_plain.bytes()) << "split K differs from the concatenated K";
  HostTensor ref(DType::kFP64, {tq, 16, 128});
  TensorView hd = d.view();
  reference::ragged_prefill(p.q.view(), p.k_full.view(), p.v.view(), p.qo.data(), p.kv.data(), p.batch(), o,
                            ref.view(), nullptr, Descales{&hd, &hd, &hd});
  const double err = relative_error(out_split, ref);
  std::printf("[   CASE   ] e4m3 d%d split K: relerr %.3e\n", dqk, err);
  EXPECT_LE(err, 3e-2);
}

INSTANTIATE_TEST_SUITE_P(Dims, CudaFp8, ::testing::Values(192, 128),
                         [](const ::testing::TestParamInfo<int>& i) { return "d" + std::to_string(i.param) + "x128"; });

}  // namespace
}  // namespace test
}  // namespace mlakit
