// The README's C++ example as a program: plan once per batch, run once per layer, check a few
// rows against the float64 reference. Runs on the GPU when one is usable, else on the CPU
// backend. Built as `mlakit-example`; CTest runs it, so the documented usage keeps compiling
// and working.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "mlakit/mlakit.h"

namespace {

// Host bf16 buffer with random normal values.
std::vector<uint16_t> random_bf16(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> dist;
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = mlakit::float_to_bf16(dist(rng));
  return v;
}

}  // namespace

int main() {
  using mlakit::DType;
  const mlakit::Device dev =
      mlakit::cuda_device_count() > 0 ? mlakit::Device::cuda(0) : mlakit::Device::cpu();
  std::printf("device: %s\n", mlakit::device_description(dev).c_str());

  // Once, at engine start: static shape and capacity.
  mlakit::PrefillConfig cfg;
  cfg.num_qo_heads = 16;
  cfg.num_kv_heads = 16;
  cfg.head_dim_qk = 192;
  cfg.head_dim_vo = 128;
  cfg.dtype = DType::kBF16;
  cfg.max_batch = 8;
  cfg.max_q_tokens = 1024;
  cfg.max_kv_tokens = 2048;
  cfg.device = dev;
  mlakit::RaggedPrefill attn(cfg);

  // One batch: three sequences with earlier context (kv longer than q), causal.
  const std::vector<int32_t> qo_indptr = {0, 100, 101, 301};
  const std::vector<int32_t> kv_indptr = {0, 150, 350, 550};
  const int batch = 3;
  const int64_t tq = qo_indptr.back(), tk = kv_indptr.back();
  mlakit::PrefillOptions opt;
  opt.causal = true;
  attn.plan(qo_indptr.data(), kv_indptr.data(), batch, opt);

  std::mt19937_64 rng(7);
  const int layers = 2;
  int failures = 0;
  for (int layer = 0; layer < layers; ++layer) {
    // Host inputs for this layer, copied to the device (an engine already has them there).
    std::vector<uint16_t> hq = random_bf16(tq * 16 * 192, rng), hk = random_bf16(tk * 16 * 192, rng),
                          hv = random_bf16(tk * 16 * 128, rng), hout(tq * 16 * 128);
    auto to_dev = [&](const std::vector<uint16_t>& h) {
      void* p = mlakit::device_alloc(h.size() * 2, dev);
      mlakit::copy_bytes(p, dev, h.data(), mlakit::Device::cpu(), h.size() * 2);
      return p;
    };
    void* dq = to_dev(hq);
    void* dk = to_dev(hk);
    void* dv = to_dev(hv);
    void* dout = to_dev(hout);
    mlakit::TensorView q(dq, DType::kBF16, {tq, 16, 192}, dev);
    mlakit::TensorView k(dk, DType::kBF16, {tk, 16, 192}, dev);
    mlakit::TensorView v(dv, DType::kBF16, {tk, 16, 128}, dev);
    mlakit::TensorView out(dout, DType::kBF16, {tq, 16, 128}, dev);
    attn.run(q, k, v, out);  // once per layer: only launches
    mlakit::copy_bytes(hout.data(), mlakit::Device::cpu(), dout, dev, hout.size() * 2);
    mlakit::synchronize(dev);

    // Check a few (row, head) pairs against the float64 reference.
    mlakit::TensorView hq_v(hq.data(), DType::kBF16, {tq, 16, 192});
    mlakit::TensorView hk_v(hk.data(), DType::kBF16, {tk, 16, 192});
    mlakit::TensorView hv_v(hv.data(), DType::kBF16, {tk, 16, 128});
    double err2 = 0, ref2 = 0;
    for (int64_t row : {int64_t{0}, int64_t{99}, int64_t{100}, int64_t{200}, tq - 1}) {
      for (int head : {0, 15}) {
        double ref[128], lse;
        mlakit::reference::attention_row(hq_v, hk_v, hv_v, qo_indptr.data(), kv_indptr.data(),
                                         batch, opt, row, head, ref, &lse);
        for (int d = 0; d < 128; ++d) {
          const double got = mlakit::bf16_to_float(hout[(row * 16 + head) * 128 + d]);
          err2 += (got - ref[d]) * (got - ref[d]);
          ref2 += ref[d] * ref[d];
        }
      }
    }
    const double rel = std::sqrt(err2 / ref2);
    const bool ok = std::isfinite(rel) && rel <= 1e-2;
    failures += ok ? 0 : 1;
    std::printf("layer %d: relative error vs reference %.2e %s\n", layer, rel, ok ? "OK" : "FAIL");
    for (void* p : {dq, dk, dv, dout}) mlakit::device_free(p, dev);
  }
  return failures == 0 ? 0 : 1;
}
