// What `mlakit-bench seed` keeps on the device for one case: DeepSeek-Coder-V2-Lite's attention
// config, per-layer inputs, caches and outputs, and the host arrays of each step's plan.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "mlakit/mlakit.h"

namespace mlakit_bench {

using mlakit::Device;
using mlakit::DType;
using mlakit::TensorView;

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  Device dev;
  Buf(size_t n, Device d) : bytes(n), dev(d) { p = mlakit::device_alloc(std::max<size_t>(n, 256), d); }
  ~Buf() { mlakit::device_free(p, dev); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

inline std::vector<uint16_t> random_bf16(size_t n, double stddev, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, static_cast<float>(stddev));
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = mlakit::float_to_bf16(nd(rng));
  return v;
}

inline mlakit::MlaConfig model_config(int heads, int block_size, Device dev) {
  mlakit::MlaConfig c;
  c.num_heads = heads;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.dtype = DType::kBF16;
  c.block_size = block_size;
  c.device = dev;
  // Every request up-projects: the seed's step as recorded (its graphs are keyed by gathered rows
  // alone). bench/compare_mla.py --absorb measures the absorbed requests on the same schedule.
  c.absorb_max_query_len = 0;
  return c;
}

// Everything one case keeps on the device: per-layer inputs, caches and outputs.
struct Model {
  mlakit::MlaConfig cfg;
  int layers = 0;
  int64_t rows = 0;  // token bucket: the budget
  std::vector<std::unique_ptr<Buf>> q, kv_c, k_pe, w, cache, out;

  Model(const mlakit::MlaConfig& c, int n_layers, int64_t bucket, std::mt19937_64& rng) : cfg(c), layers(n_layers), rows(bucket) {
    const Device d = c.device;
    const int64_t H = c.num_heads;
    const auto hq = random_bf16(static_cast<size_t>(rows * H * 192), 1.0, rng);
    const auto hc = random_bf16(static_cast<size_t>(rows * 512), 1.0, rng);
    const auto hp = random_bf16(static_cast<size_t>(rows * 64), 1.0, rng);
    const auto hw = random_bf16(static_cast<size_t>(H * 256 * 512), 1.0 / std::sqrt(512.0), rng);
    auto put = [&](std::vector<std::unique_ptr<Buf>>& v, const std::vector<uint16_t>& src) {
      v.push_back(std::make_unique<Buf>(src.size() * 2, d));
      mlakit::copy_bytes(v.back()->p, d, src.data(), Device::cpu(), src.size() * 2);
    };
    const size_t cache_bytes = static_cast<size_t>(c.num_blocks) * c.block_size * 576 * 2;
    for (int l = 0; l < layers; ++l) {
      put(q, hq);
      put(kv_c, hc);
      put(k_pe, hp);
      put(w, hw);
      cache.push_back(std::make_unique<Buf>(cache_bytes, d));
      mlakit::fill_bytes(cache.back()->p, d, 0, cache_bytes);
      out.push_back(std::make_unique<Buf>(static_cast<size_t>(rows * H * 128 * 2), d));
    }
    mlakit::synchronize(d);
  }

  // Layer l's tensors over the first `n` rows of its buffers (n <= rows; 0 = all). A graph for a
  // token bucket captures views of bucket rows (run() checks them against the step's tokens).
  mlakit::MlaLayer layer(int l, int64_t n = 0) const {
    const Device d = cfg.device;
    const int64_t H = cfg.num_heads, r = n > 0 ? std::min(n, rows) : rows;
    return mlakit::MlaLayer{TensorView(q[l]->p, DType::kBF16, {r, H, 192}, d),
                            TensorView(kv_c[l]->p, DType::kBF16, {r, 512}, d),
                            TensorView(k_pe[l]->p, DType::kBF16, {r, 64}, d),
                            TensorView(w[l]->p, DType::kBF16, {H * 256, 512}, d),
                            TensorView(cache[l]->p, DType::kBF16, {cfg.num_blocks, cfg.block_size, 576}, d)};
  }
  TensorView output(int l, int64_t n = 0) const {
    const int64_t r = n > 0 ? std::min(n, rows) : rows;
    return TensorView(out[l]->p, DType::kBF16, {r, cfg.num_heads, 128}, cfg.device);
  }
};

// Host arrays of one step's plan, built before timing (an engine has them ready too).
struct StepInput {
  std::vector<int32_t> q_lens, ctx_lens, block_table;
  int cols = 0;
  mlakit::MlaBatch batch() const {
    mlakit::MlaBatch b;
    b.batch_size = static_cast<int>(q_lens.size());
    b.query_lens = q_lens.data();
    b.context_lens = ctx_lens.data();
    b.block_table = block_table.data();
    b.block_table_cols = cols;
    return b;
  }
};

}  // namespace mlakit_bench
