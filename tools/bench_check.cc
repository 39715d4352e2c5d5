// See bench_check.h.
#include "bench_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <thread>

#include "mlakit/reference.h"
#include "mlakit/runtime.h"

namespace mlakit_bench {

namespace {

// Runs body(i) for i in [0, n) on up to hardware_concurrency threads.
template <class F>
void parallel_for(size_t n, F body) {
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::min(hw, n);
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([=, &body] {
      for (size_t i = t; i < n; i += threads) body(i);
    });
  }
  for (auto& th : pool) th.join();
}

float to_float(uint16_t bits, mlakit::DType dtype) {
  return dtype == mlakit::DType::kFP16 ? mlakit::fp16_to_float(bits) : mlakit::bf16_to_float(bits);
}

}  // namespace

double default_tolerance(mlakit::DType dtype) {
  return dtype == mlakit::DType::kFP16 ? 2e-3 : dtype == mlakit::DType::kE4M3 ? 5e-2 : 1e-2;
}

std::vector<uint8_t> random_normal_bytes(size_t n, uint64_t seed, mlakit::DType dtype) {
  const bool fp8 = dtype == mlakit::DType::kE4M3;
  const std::vector<uint16_t> v = random_normal_16bit(n, seed, fp8 ? mlakit::DType::kBF16 : dtype);
  std::vector<uint8_t> out(n * (fp8 ? 1 : 2));
  if (fp8) {
    // Never exact zeros (as above): values that round to 0 in e4m3 take its smallest subnormal.
    for (size_t i = 0; i < n; ++i) {
      const uint8_t b = mlakit::float_to_e4m3(mlakit::bf16_to_float(v[i]));
      out[i] = (b & 0x7f) == 0 ? static_cast<uint8_t>(b | 1) : b;
    }
  } else if (n > 0) {
    std::memcpy(out.data(), v.data(), n * 2);
  }
  return out;
}

std::vector<uint16_t> random_normal_16bit(size_t n, uint64_t seed, mlakit::DType dtype) {
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<uint16_t> out(n);
  const size_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, [&](size_t c) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + c + 1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const size_t end = std::min(n, (c + 1) * kChunk);
    for (size_t i = c * kChunk; i < end; ++i) {
      float x = dist(rng);
      // Never exact zeros: a zero input could hide a kernel that skips work.
      if (x == 0.0f) x = 1e-3f;
      out[i] = dtype == mlakit::DType::kFP16 ? mlakit::float_to_fp16(x) : mlakit::float_to_bf16(x);
    }
  });
  return out;
}

std::vector<std::pair<int64_t, int>> sample_pairs(const Workload& w, int n_random, uint64_t seed) {
  std::vector<std::pair<int64_t, int>> pairs;
  const std::vector<int32_t> qo = w.qo_indptr();
  for (int b = 0; b < w.batch(); ++b) {
    if (qo[b + 1] == qo[b]) continue;
    pairs.emplace_back(qo[b], b % w.heads);
    if (qo[b + 1] - 1 != qo[b]) pairs.emplace_back(qo[b + 1] - 1, (b + w.heads / 2) % w.heads);
  }
  const int64_t total = w.total_q();
  if (total > 0) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> row(0, total - 1);
    std::uniform_int_distribution<int> head(0, w.heads - 1);
    for (int i = 0; i < n_random; ++i) pairs.emplace_back(row(rng), head(rng));
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  return pairs;
}

Reference compute_reference(const Workload& w, const mlakit::TensorView& q,
                            const mlakit::TensorView& k, const mlakit::TensorView& v,
                            std::vector<std::pair<int64_t, int>> pairs) {
  Reference ref;
  ref.pairs = std::move(pairs);
  ref.out.assign(ref.pairs.size() * w.dvo, 0.0);
  ref.lse.assign(ref.pairs.size(), 0.0);
  const std::vector<int32_t> qo = w.qo_indptr();
  const std::vector<int32_t> kv = w.kv_indptr();
  parallel_for(ref.pairs.size(), [&](size_t i) {
    mlakit::reference::attention_row(q, k, v, qo.data(), kv.data(), w.batch(), w.options,
                                     ref.pairs[i].first, ref.pairs[i].second,
                                     ref.out.data() + i * w.dvo, ref.lse.data() + i);
  });
  return ref;
}

CheckResult compare_to_reference(const Workload& w, const Reference& ref, const uint16_t* out_bits,
                                 const float* lse, double tolerance, double lse_tolerance) {
  CheckResult r;
  r.pairs = static_cast<int>(ref.pairs.size());
  bool ok = true;
  auto fail = [&](const std::string& msg) {
    if (ok) r.detail = msg;
    ok = false;
  };
  for (size_t i = 0; i < ref.pairs.size(); ++i) {
    const int64_t row = ref.pairs[i].first;
    const int head = ref.pairs[i].second;
    const uint16_t* o = out_bits + (row * w.heads + head) * w.dvo;
    const double* rr = ref.out.data() + i * w.dvo;
    double max_ref = 0.0, max_diff = 0.0;
    bool nan = false;
    for (int d = 0; d < w.dvo; ++d) {
      const double x = to_float(o[d], w.dtype);
      if (!std::isfinite(x)) nan = true;
      max_ref = std::max(max_ref, std::fabs(rr[d]));
      max_diff = std::max(max_diff, std::fabs(x - rr[d]));
    }
    std::ostringstream where;
    where << "row " << row << " head " << head;
    if (nan) {
      ++r.nan_pairs;
      r.max_relerr = std::numeric_limits<double>::infinity();
      fail("non-finite output at " + where.str());
      continue;
    }
    // A row that sees no key must be exactly 0 (prefill.h); then the absolute error counts.
    const double rel = max_ref > 0.0 ? max_diff / max_ref : max_diff;
    r.max_relerr = std::max(r.max_relerr, rel);
    if (rel > tolerance) {
      std::ostringstream m;
      m << "relative error " << rel << " > " << tolerance << " at " << where.str();
      fail(m.str());
    }
    if (lse) {
      const double got = lse[row * w.heads + head];
      const double want = ref.lse[i];
      double err;
      if (std::isinf(want) && want < 0) {
        err = (std::isinf(got) && got < 0) ? 0.0 : std::numeric_limits<double>::infinity();
      } else {
        err = std::isfinite(got) ? std::fabs(got - want) : std::numeric_limits<double>::infinity();
      }
      r.max_lse_err = std::max(r.max_lse_err, err);
      if (!(err <= lse_tolerance)) {
        std::ostringstream m;
        m << "lse " << got << " vs reference " << want << " at " << where.str();
        fail(m.str());
      }
    }
  }
  r.pass = ok;
  return r;
}

}  // namespace mlakit_bench
