#include "seed_check.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <memory>
#include <random>
#include <vector>

#include "seed_model.h"

namespace mlakit_bench {

// One small step (context and new tokens, two requests) against the float64 reference.
bool seed_self_check(int heads, int block_size, Device dev, double* err_out) {
  std::mt19937_64 rng(7);
  mlakit::MlaConfig c = model_config(heads, block_size, dev);
  const std::vector<int32_t> q_lens = {64, 37}, ctx_lens = {40, 0};
  const int bs = block_size;
  const int cols = (40 + 64 + bs - 1) / bs + 1;
  c.num_blocks = 2 * cols;
  c.max_batch = 2;
  c.max_tokens = 101;
  c.max_context_tokens = 40;
  std::vector<int32_t> bt(static_cast<size_t>(2 * cols));
  std::iota(bt.begin(), bt.end(), 0);
  std::shuffle(bt.begin(), bt.end(), rng);  // every block once, scattered
  const int64_t H = c.num_heads, T = 101, L = 512, R = 64;
  auto q = random_bf16(static_cast<size_t>(T * H * 192), 1.0, rng);
  auto kv_c = random_bf16(static_cast<size_t>(T * L), 1.0, rng);
  auto k_pe = random_bf16(static_cast<size_t>(T * R), 1.0, rng);
  auto w = random_bf16(static_cast<size_t>(H * 256 * L), 1.0 / std::sqrt(512.0), rng);
  auto cache = random_bf16(static_cast<size_t>(c.num_blocks * bs * (L + R)), 1.0, rng);
  mlakit::MlaBatch b;
  b.batch_size = 2;
  b.query_lens = q_lens.data();
  b.context_lens = ctx_lens.data();
  b.block_table = bt.data();
  b.block_table_cols = cols;

  // Reference first: it reads the cache before the step writes into it.
  std::vector<double> ref(static_cast<size_t>(T * H * 128));
  const Device h = Device::cpu();
  mlakit::MlaLayer hy{TensorView(q.data(), DType::kBF16, {T, H, 192}, h), TensorView(kv_c.data(), DType::kBF16, {T, L}, h),
                      TensorView(k_pe.data(), DType::kBF16, {T, R}, h), TensorView(w.data(), DType::kBF16, {H * 256, L}, h),
                      TensorView(cache.data(), DType::kBF16, {c.num_blocks, bs, L + R}, h)};
  mlakit::reference::mla_step(c, b, hy, 0.0f, TensorView(ref.data(), DType::kFP64, {T, H, 128}, h));

  auto upload = [&](const std::vector<uint16_t>& v) {
    auto buf = std::make_unique<Buf>(v.size() * 2, dev);
    mlakit::copy_bytes(buf->p, dev, v.data(), h, v.size() * 2);
    return buf;
  };
  auto dq = upload(q), dc = upload(kv_c), dp = upload(k_pe), dw = upload(w), dk = upload(cache);
  Buf dout(static_cast<size_t>(T * H * 128 * 2), dev);
  mlakit::fill_bytes(dout.p, dev, 0xFF, dout.bytes);  // NaN poison
  mlakit::MlaStep step(c);
  step.plan(b);
  mlakit::MlaLayer y{TensorView(dq->p, DType::kBF16, {T, H, 192}, dev), TensorView(dc->p, DType::kBF16, {T, L}, dev),
                     TensorView(dp->p, DType::kBF16, {T, R}, dev), TensorView(dw->p, DType::kBF16, {H * 256, L}, dev),
                     TensorView(dk->p, DType::kBF16, {c.num_blocks, bs, L + R}, dev)};
  step.run(y, TensorView(dout.p, DType::kBF16, {T, H, 128}, dev));
  mlakit::synchronize(dev);
  std::vector<uint16_t> got(static_cast<size_t>(T * H * 128));
  mlakit::copy_bytes(got.data(), h, dout.p, dev, got.size() * 2);
  mlakit::synchronize(dev);
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = mlakit::bf16_to_float(got[i]);
    if (std::isnan(g)) num = INFINITY;
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  *err_out = std::sqrt(num / den);
  return *err_out <= 1e-2;
}

}  // namespace mlakit_bench
