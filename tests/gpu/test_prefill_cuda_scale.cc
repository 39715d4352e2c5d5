// Scale and determinism properties of each CUDA kernel, selected explicitly: a 64k-token
// sequence, a thousand short sequences, batch invariance (a sequence's output bits do not depend
// on what else is in the batch), and element offsets past 2^31.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/gpu_case.h"
#include "mlakit/mlakit.h"
#include "plan/kv_split.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {
namespace {

// Relative error of sampled (row, head) outputs against reference::attention_row, plus NaN count.
struct SampleCheck {
  double max_rel = 0;
  int64_t nan = 0;
};
SampleCheck check_rows(const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor& out,
                       const std::vector<int32_t>& qo, const std::vector<int32_t>& kv, const PrefillOptions& opts,
                       const std::vector<int64_t>& rows, int heads, int dvo) {
  SampleCheck r;
  std::vector<double> ref(dvo);
  for (int64_t row : rows) {
    for (int h = 0; h < heads; ++h) {
      double lse = 0;
      reference::attention_row(q.view(), k.view(), v.view(), qo.data(), kv.data(), static_cast<int>(qo.size()) - 1,
                               opts, row, h, ref.data(), &lse);
      double num = 0, den = 0;
      for (int d = 0; d < dvo; ++d) {
        const double g = out.get((row * heads + h) * dvo + d);
        if (std::isnan(g)) ++r.nan;
        num += (g - ref[d]) * (g - ref[d]);
        den += ref[d] * ref[d];
      }
      if (den > 0) r.max_rel = std::max(r.max_rel, std::sqrt(num / den));
    }
  }
  return r;
}

class CudaScale : public ::testing::TestWithParam<KernelPreference> {
 protected:
  void SetUp() override { MLAKIT_SKIP_IF_KERNEL_UNAVAILABLE(GetParam(), 192, 128, DType::kBF16); }
};

TEST_P(CudaScale, SixtyFourThousandTokenSequence) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c;
  c.kernel = GetParam();
  const int64_t n = 65536;
  const int h = 1;
  HostTensor q(DType::kBF16, {n, h, 192}), k(DType::kBF16, {n, h, 192}), v(DType::kBF16, {n, h, 128});
  q.fill_normal(rng);
  k.fill_normal(rng);
  v.fill_normal(rng);
  const std::vector<int32_t> ind = {0, static_cast<int32_t>(n)};
  const Device dev = Device::cuda(0);
  DeviceTensor dq(q, dev), dk(k, dev), dv(v, dev);
  HostTensor out(DType::kBF16, {n, h, 128});
  out.fill_bytes(0xFF);
  DeviceTensor dout(out, dev);
  RaggedPrefill p(cuda_config(h, h, 192, 128, DType::kBF16, 1, n, n, GetParam()));
  for (bool causal : {true, false}) {
    PrefillOptions o;
    o.causal = causal;
    p.plan(ind.data(), ind.data(), 1, o);
    p.run(dq.view(), dk.view(), dv.view(), dout.view());
    synchronize(dev);
    dout.copy_to(out);
    std::vector<int64_t> rows = {0, 1, 127, 128, 129, 32767, 32768, n - 129, n - 128, n - 2, n - 1};
    for (int i = 0; i < 24; ++i) rows.push_back(static_cast<int64_t>(rng() % n));
    const SampleCheck r = check_rows(q, k, v, out, ind, ind, o, rows, h, 128);
    std::printf("[   CASE   ] %s 1x65536 causal=%d: sampled max rel err %.3e\n", kernel_preference_name(GetParam()),
                causal, r.max_rel);
    EXPECT_EQ(r.nan, 0);
    EXPECT_LE(r.max_rel, 1e-2);
    int64_t nan_total = 0;
    for (double x : out.to_doubles()) nan_total += std::isnan(x) ? 1 : 0;
    EXPECT_EQ(nan_total, 0) << "every row written";
  }
}

TEST_P(CudaScale, ThousandShortSequences) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c;
  c.kernel = GetParam();
  c.seed = rng();
  c.heads = 2;
  c.kv_heads = 2;
  for (int i = 0; i < 1000; ++i) {
    const int lq = static_cast<int>(rng() % 41);  // 0 .. 40
    c.q_lens.push_back(lq);
    c.kv_lens.push_back(lq + static_cast<int>(rng() % 3 == 0 ? rng() % 60 : 0));  // some with context
  }
  c.opts.causal = true;
  const CaseResult r = run_gpu_case(c);
  std::printf("[   CASE   ] %s 1000 short sequences: relerr %.3e\n", kernel_preference_name(GetParam()),
              r.out_relerr);
  EXPECT_EQ(r.unwritten_or_nan, 0);
  EXPECT_EQ(r.empty_rows_wrong, 0);
  EXPECT_LE(r.out_relerr, 1e-2);
}

// One sequence's rows inside a batch built around it: its data is the same in every batch, the
// neighbours are fresh random sequences.
struct Placed {
  std::vector<int32_t> q_lens, kv_lens;
  int index;  // position of the probe sequence
};

constexpr int kProbeHeads = 4;  // heads of every batch run_probe_in_batch builds

// A probe sequence's own q, k and v (random), placed unchanged into every batch built around it.
struct Probe {
  HostTensor q, k, v;
};
Probe random_probe(int lq, int lk, std::mt19937_64& rng) {
  Probe p{HostTensor(DType::kBF16, {lq, kProbeHeads, 192}), HostTensor(DType::kBF16, {lk, kProbeHeads, 192}),
          HostTensor(DType::kBF16, {lk, kProbeHeads, 128})};
  p.q.fill_normal(rng);
  p.k.fill_normal(rng);
  p.v.fill_normal(rng);
  return p;
}

std::vector<uint8_t> run_probe_in_batch(const Placed& b, const HostTensor& pq, const HostTensor& pk,
                                        const HostTensor& pv, const PrefillOptions& o, KernelPreference kern,
                                        KvSplitMode split, std::mt19937_64& rng, int* split_slots,
                                        int* grid_blocks = nullptr) {
  const int h = kProbeHeads;
  const std::vector<int32_t> qo = make_indptr(b.q_lens), kv = make_indptr(b.kv_lens);
  HostTensor q(DType::kBF16, {qo.back(), h, 192}), k(DType::kBF16, {kv.back(), h, 192}),
      v(DType::kBF16, {kv.back(), h, 128});
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
  const Device dev = Device::cuda(0);
  DeviceTensor dq(q, dev), dk(k, dev), dv(v, dev);
  HostTensor out(DType::kBF16, {qo.back(), h, 128});
  out.fill_bytes(0xFF);
  DeviceTensor dout(out, dev);
  const int batch = static_cast<int>(b.q_lens.size());
  PrefillConfig cfg = cuda_config(h, h, 192, 128, DType::kBF16, batch, qo.back(), kv.back(), kern);
  cfg.kv_split = split;
  RaggedPrefill p(cfg);
  p.plan(qo.data(), kv.data(), batch, o);
  *split_slots = p.info().split_slots;
  if (grid_blocks != nullptr) *grid_blocks = p.info().grid_blocks;
  p.run(dq.view(), dk.view(), dv.view(), dout.view());
  synchronize(dev);
  dout.copy_to(out);
  const size_t row_bytes = out.nbytes() / static_cast<size_t>(qo.back());
  const uint8_t* first = out.bytes().data() + qo[b.index] * row_bytes;
  return std::vector<uint8_t>(first, first + static_cast<size_t>(b.q_lens[b.index]) * row_bytes);
}

TEST_P(CudaScale, BatchInvariantBitwise) {
  std::mt19937_64 rng(std::random_device{}());
  // Probes: a causal prompt, and new tokens after a context (chunked prefill).
  const std::vector<std::pair<int, int>> probes = {{999, 999}, {200, 1100}};
  for (const auto& [lq, lk] : probes) {
    const Probe pr = random_probe(lq, lk, rng);
    PrefillOptions o;
    o.causal = true;
    const std::vector<Placed> batches = {
        {{lq}, {lk}, 0},                                               // alone
        {{5, lq, 3000, 129}, {5, lk, 3000, 200}, 1},                   // with a long neighbour
        {{1, 1, 1, 1, 1, 1, 1, lq}, {1, 2, 3, 4, 5, 6, 7, lk}, 7},     // many tiny ones first
        {{lq, 999, 999, 999, 999, 999, 999, 999}, {lk, 999, 999, 999, 999, 999, 999, 999}, 0},  // a full step
    };
    // With key-range splitting on (the probe alone is 8 q tiles x 4 heads on a 132-SM grid: it
    // splits, and by its own lengths it splits the same way in every batch) and off.
    for (KvSplitMode split : {KvSplitMode::kOn, KvSplitMode::kOff}) {
      int slots = 0;
      const std::vector<uint8_t> alone = run_probe_in_batch(batches[0], pr.q, pr.k, pr.v, o, GetParam(), split, rng, &slots);
      if (GetParam() == KernelPreference::kSm90 && split == KvSplitMode::kOn) {
        EXPECT_GT(slots, 0) << "probe (" << lq << ", " << lk << ") alone should split";
      }
      for (size_t i = 1; i < batches.size(); ++i) {
        const std::vector<uint8_t> got =
            run_probe_in_batch(batches[i], pr.q, pr.k, pr.v, o, GetParam(), split, rng, &slots);
        EXPECT_EQ(got, alone) << kernel_preference_name(GetParam()) << " probe (" << lq << ", " << lk
                              << ") differs inside batch " << i << ", kv_split " << kv_split_mode_name(split);
      }
    }
  }
}

// The same for the tail rule (plan/kv_split.h, on by default): a non-causal probe of 133 q tiles
// x 4 heads = 532 items (4 rounds of 132 + 4) splits its last q tile by its own lengths, alone
// and beside neighbours that split too or do not.
TEST_P(CudaScale, BatchInvariantBitwiseTailSplit) {
  std::mt19937_64 rng(std::random_device{}());
  const int lq = 17000, lk = 700;
  const Probe pr = random_probe(lq, lk, rng);
  PrefillOptions o;
  o.causal = false;
  const std::vector<Placed> batches = {
      {{lq}, {lk}, 0},                                          // alone
      {{5, lq, 3000, 129}, {5, lk, 3000, 200}, 1},              // short neighbours
      {{17000, 1, lq}, {900, 1, lk}, 2},                        // after another sequence that splits
      {{lq, 300, 300, 300}, {lk, 4000, 4000, 4000}, 0},         // first, before longer kv
  };
  int slots = 0, grid = 0;
  const std::vector<uint8_t> alone =
      run_probe_in_batch(batches[0], pr.q, pr.k, pr.v, o, GetParam(), KvSplitMode::kAuto, rng, &slots, &grid);
  if (GetParam() == KernelPreference::kSm90) {
    const plan::KvSplit k =
        plan::kv_split_for(lq, lk, false, -1, kProbeHeads, 128, 128, plan::KvSplitSettings{0, 1 << 30, grid});
    EXPECT_EQ(slots, k.split_tiles * kProbeHeads) << "the probe alone, grid " << grid;
    if (grid == 132) EXPECT_EQ(slots, kProbeHeads) << "on 132 SMs the probe splits its last q tile";
  }
  for (size_t i = 1; i < batches.size(); ++i) {
    const std::vector<uint8_t> got =
        run_probe_in_batch(batches[i], pr.q, pr.k, pr.v, o, GetParam(), KvSplitMode::kAuto, rng, &slots);
    EXPECT_EQ(got, alone) << kernel_preference_name(GetParam()) << " tail-split probe differs inside batch " << i;
  }
}

// Element offsets past 2^31 in q/out (90000 rows x 128 heads x 192) and in k/v (120000 rows):
// only the rows the probe sequence reads are initialized, so a 32-bit offset would read
// uninitialized memory and fail the comparison.
TEST_P(CudaScale, SixtyFourBitOffsets) {
  std::mt19937_64 rng(std::random_device{}());
  const int h = 128;
  const int64_t q_rows = 90000, kv_rows = 120000;
  const int lq = 300, lk = 1000;
  // Sequence 0: many q rows and no keys (out = 0); sequence 1: no q rows, so its (poisoned)
  // keys are never read; sequence 2: the probe, at the far end of every tensor.
  const std::vector<int32_t> qo = {0, static_cast<int32_t>(q_rows - lq), static_cast<int32_t>(q_rows - lq),
                                   static_cast<int32_t>(q_rows)};
  const std::vector<int32_t> kv = {0, 0, static_cast<int32_t>(kv_rows - lk), static_cast<int32_t>(kv_rows)};
  const Device dev = Device::cuda(0);
  const DType t = DType::kBF16;
  const size_t es = 2;
  void* dq = device_alloc(q_rows * h * 192 * es, dev);
  void* dk = device_alloc(kv_rows * h * 192 * es, dev);
  void* dv = device_alloc(kv_rows * h * 128 * es, dev);
  void* dout = device_alloc(q_rows * h * 128 * es, dev);
  HostTensor pq(t, {lq, h, 192}), pk(t, {lk, h, 192}), pv(t, {lk, h, 128});
  pq.fill_normal(rng);
  pk.fill_normal(rng);
  pv.fill_normal(rng);
  copy_bytes(static_cast<uint8_t*>(dq) + (q_rows - lq) * h * 192 * es, dev, pq.data(), Device::cpu(), pq.nbytes());
  copy_bytes(static_cast<uint8_t*>(dk) + (kv_rows - lk) * h * 192 * es, dev, pk.data(), Device::cpu(), pk.nbytes());
  copy_bytes(static_cast<uint8_t*>(dv) + (kv_rows - lk) * h * 128 * es, dev, pv.data(), Device::cpu(), pv.nbytes());
  fill_bytes(dout, dev, 0xFF, q_rows * h * 128 * es);
  // Sequence 1's keys are never read (it has no queries): poison them.
  fill_bytes(dk, dev, 0xFF, (kv_rows - lk) * h * 192 * es);
  fill_bytes(dv, dev, 0xFF, (kv_rows - lk) * h * 128 * es);
  {
    RaggedPrefill p(cuda_config(h, h, 192, 128, t, 3, q_rows, kv_rows, GetParam()));
    PrefillOptions o;
    o.causal = true;
    p.plan(qo.data(), kv.data(), 3, o);
    p.run(TensorView(dq, t, {q_rows, h, 192}, dev), TensorView(dk, t, {kv_rows, h, 192}, dev),
          TensorView(dv, t, {kv_rows, h, 128}, dev), TensorView(dout, t, {q_rows, h, 128}, dev));
    synchronize(dev);
    HostTensor out(t, {lq, h, 128});
    copy_bytes(out.data(), Device::cpu(), static_cast<uint8_t*>(dout) + (q_rows - lq) * h * 128 * es, dev,
               out.nbytes());
    HostTensor head_rows(t, {2, h, 128});  // first rows of sequence 0: no keys, so exactly 0
    copy_bytes(head_rows.data(), Device::cpu(), dout, dev, head_rows.nbytes());
    synchronize(dev);
    const std::vector<int32_t> pqo = {0, lq}, pkv = {0, lk};
    std::vector<int64_t> rows = {0, 1, 127, 128, lq - 1};
    for (int i = 0; i < 6; ++i) rows.push_back(static_cast<int64_t>(rng() % lq));
    const SampleCheck r = check_rows(pq, pk, pv, out, pqo, pkv, o, rows, h, 128);
    std::printf("[   CASE   ] %s offsets past 2^31: sampled max rel err %.3e\n", kernel_preference_name(GetParam()),
                r.max_rel);
    EXPECT_EQ(r.nan, 0);
    EXPECT_LE(r.max_rel, 1e-2);
    int64_t nonzero = 0;
    for (double x : head_rows.to_doubles()) nonzero += x != 0.0 ? 1 : 0;
    EXPECT_EQ(nonzero, 0);
  }
  device_free(dq, dev);
  device_free(dk, dev);
  device_free(dv, dev);
  device_free(dout, dev);
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaScale, ::testing::ValuesIn(kAllKernels),
                         kernel_param_name);

}  // namespace
}  // namespace test
}  // namespace mlakit
