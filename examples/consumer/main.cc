// Consumer of an installed mlakit: one ragged prefill on the CPU backend, checked against the
// float64 reference; exits non-zero on a mismatch. Public headers only.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <mlakit/mlakit.h>

int main() {
#ifdef MLAKIT_WITH_CUDA
  const bool compiled_with_cuda = true;  // the imported target carries the definition
#else
  const bool compiled_with_cuda = false;
#endif
  if (compiled_with_cuda != mlakit::built_with_cuda()) {
    std::printf("FAIL: MLAKIT_WITH_CUDA does not match the library\n");
    return 1;
  }
  const int H = 4, Hkv = 2, D = 64;
  const std::vector<int32_t> qo = {0, 5, 37}, kv = {0, 9, 41};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  auto bf16 = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = mlakit::float_to_bf16(nd(rng));
    return v;
  };
  std::vector<uint16_t> q = bf16(37 * H * D), k = bf16(41 * Hkv * D), v = bf16(41 * Hkv * D), out(37 * H * D);
  std::vector<double> ref(37 * H * D);
  using mlakit::DType;
  mlakit::TensorView qv(q.data(), DType::kBF16, {37, H, D}), kv_(k.data(), DType::kBF16, {41, Hkv, D}),
      vv(v.data(), DType::kBF16, {41, Hkv, D}), ov(out.data(), DType::kBF16, {37, H, D}),
      rv(ref.data(), DType::kFP64, {37, H, D});
  mlakit::PrefillOptions opt;
  opt.causal = true;
  mlakit::ragged_prefill(qv, kv_, vv, qo.data(), kv.data(), 2, opt, ov);
  mlakit::reference::ragged_prefill(qv, kv_, vv, qo.data(), kv.data(), 2, opt, rv);
  double e2 = 0, r2 = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = mlakit::bf16_to_float(out[i]) - ref[i];
    e2 += d * d;
    r2 += ref[i] * ref[i];
  }
  const double rel = std::sqrt(e2 / r2);
  std::printf("mlakit consumer: CUDA %s, relative error %.2e\n", compiled_with_cuda ? "on" : "off", rel);
  return std::isfinite(rel) && rel < 1e-2 ? 0 : 1;
}
