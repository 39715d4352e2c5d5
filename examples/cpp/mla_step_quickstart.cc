// The README's MLA example as a program: one MlaStep, planned once for an engine step (two
// requests: one with cached context, one fresh), run for a few layers, each layer checked against
// the float64 reference of the whole step. GPU when one is usable, else the CPU backend. Built as
// `mlakit-mla-example`; CTest runs it.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "mlakit/mlakit.h"

namespace {

std::vector<uint16_t> random_bf16(size_t n, double stddev, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, static_cast<float>(stddev));
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = mlakit::float_to_bf16(dist(rng));
  return v;
}

// Device copy of a host buffer (plain host memory on the CPU backend).
void* upload(const std::vector<uint16_t>& h, mlakit::Device d) {
  void* p = mlakit::device_alloc(h.size() * 2, d);
  mlakit::copy_bytes(p, d, h.data(), mlakit::Device::cpu(), h.size() * 2);
  return p;
}

}  // namespace

int main() {
  using mlakit::DType;
  using mlakit::TensorView;
  const mlakit::Device dev = mlakit::cuda_device_count() > 0 ? mlakit::Device::cuda(0) : mlakit::Device::cpu();
  const mlakit::Device host = mlakit::Device::cpu();
  std::printf("device: %s\n", mlakit::device_description(dev).c_str());

  // Once, at engine start. DeepSeek-Coder-V2-Lite's attention: 16 heads, latent 512, 128/64/128.
  mlakit::MlaConfig cfg;
  cfg.num_heads = 16;
  cfg.block_size = 16;
  cfg.num_blocks = 32;
  cfg.max_batch = 4;
  cfg.max_tokens = 256;
  cfg.max_context_tokens = 256;
  cfg.device = dev;
  mlakit::MlaStep step(cfg);

  // Once per engine step: request 0 has 100 cached tokens and 60 new ones, request 1 is fresh.
  const std::vector<int32_t> q_lens = {60, 90}, ctx_lens = {100, 0};
  // [2, 10] block table: request 0 uses 10 blocks (160 positions), request 1 uses 6; the rest
  // of each row is padding the step never reads.
  const std::vector<int32_t> table = {3, 17, 8, 30, 21, 9, 11, 4, 6, 10,
                                      0, 5, 2, 1, 12, 28, 13, 14, 15, 16};
  mlakit::MlaBatch batch;
  batch.batch_size = 2;
  batch.query_lens = q_lens.data();
  batch.context_lens = ctx_lens.data();
  batch.block_table = table.data();
  batch.block_table_cols = 10;
  step.plan(batch);

  const int64_t T = 150, H = 16, L = 512, R = 64;
  std::mt19937_64 rng(1);
  int failures = 0;
  for (int layer = 0; layer < 3; ++layer) {
    const auto q = random_bf16(static_cast<size_t>(T * H * 192), 1.0, rng);
    const auto kv_c = random_bf16(static_cast<size_t>(T * L), 1.0, rng);
    const auto k_pe = random_bf16(static_cast<size_t>(T * R), 1.0, rng);
    const auto w = random_bf16(static_cast<size_t>(H * 256 * L), 1.0 / std::sqrt(512.0), rng);
    const auto cache = random_bf16(static_cast<size_t>(32 * 16 * (L + R)), 1.0, rng);  // earlier steps' latents

    // The float64 reference reads the cache as it was before this step.
    std::vector<double> ref(static_cast<size_t>(T * H * 128));
    mlakit::reference::mla_step(
        cfg, batch,
        mlakit::MlaLayer{TensorView(const_cast<uint16_t*>(q.data()), DType::kBF16, {T, H, 192}, host),
                         TensorView(const_cast<uint16_t*>(kv_c.data()), DType::kBF16, {T, L}, host),
                         TensorView(const_cast<uint16_t*>(k_pe.data()), DType::kBF16, {T, R}, host),
                         TensorView(const_cast<uint16_t*>(w.data()), DType::kBF16, {H * 256, L}, host),
                         TensorView(const_cast<uint16_t*>(cache.data()), DType::kBF16, {32, 16, L + R}, host)},
        0.0f, TensorView(ref.data(), DType::kFP64, {T, H, 128}, host));

    void* dq = upload(q, dev);
    void* dc = upload(kv_c, dev);
    void* dp = upload(k_pe, dev);
    void* dw = upload(w, dev);
    void* dk = upload(cache, dev);
    void* dout = mlakit::device_alloc(static_cast<size_t>(T * H * 128 * 2), dev);
    step.run(mlakit::MlaLayer{TensorView(dq, DType::kBF16, {T, H, 192}, dev), TensorView(dc, DType::kBF16, {T, L}, dev),
                              TensorView(dp, DType::kBF16, {T, R}, dev), TensorView(dw, DType::kBF16, {H * 256, L}, dev),
                              TensorView(dk, DType::kBF16, {32, 16, L + R}, dev)},
             TensorView(dout, DType::kBF16, {T, H, 128}, dev));
    std::vector<uint16_t> out(static_cast<size_t>(T * H * 128));
    mlakit::copy_bytes(out.data(), host, dout, dev, out.size() * 2);
    mlakit::synchronize(dev);
    double num = 0, den = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const double d = mlakit::bf16_to_float(out[i]) - ref[i];
      num += d * d;
      den += ref[i] * ref[i];
    }
    const double err = std::sqrt(num / den);  // NaN fails the check below
    std::printf("layer %d: relative error vs float64 reference %.2e\n", layer, err);
    if (!(err <= 1e-2)) ++failures;
    for (void* p : {dq, dc, dp, dw, dk, dout}) mlakit::device_free(p, dev);
  }
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
