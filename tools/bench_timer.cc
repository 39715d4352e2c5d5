// See bench_timer.h for the method and its limits.
#include "bench_timer.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "mlakit/runtime.h"

namespace mlakit_bench {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

TimingResult time_launches(mlakit::Device device, mlakit::Stream stream, int warmup, int iters,
                           const std::function<void(int)>& launch, const std::function<void()>& between_samples,
                           double warmup_ms) {
  int index = 0;
  const auto w0 = Clock::now();
  for (int i = 0; i < warmup; ++i) launch(index++);
  mlakit::synchronize(device, stream);
  while (ms_since(w0) < warmup_ms) {
    launch(index++);
    mlakit::synchronize(device, stream);
  }

  TimingResult r;
  r.warmup_launches = index;
  r.method = device.is_cuda() ? "host steady_clock around a synchronized batch of launches"
                              : "host steady_clock per launch";
  int per_sample = 1;
  if (device.is_cuda()) {
    // Calibrate: aim for ~1 ms per sample, at most 64 launches.
    auto t0 = Clock::now();
    launch(index++);
    mlakit::synchronize(device, stream);
    const double one = std::max(ms_since(t0), 1e-3);
    per_sample = static_cast<int>(std::min(64.0, std::max(1.0, 1.0 / one)));
  }
  r.launches_per_sample = per_sample;

  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(std::max(iters, 1)));
  for (int s = 0; s < std::max(iters, 1); ++s) {
    if (between_samples) {
      between_samples();
      mlakit::synchronize(device, stream);
    }
    auto t0 = Clock::now();
    for (int j = 0; j < per_sample; ++j) launch(index++);
    mlakit::synchronize(device, stream);
    samples.push_back(ms_since(t0) / per_sample);
  }
  r.samples = static_cast<int>(samples.size());
  r.sample_ms = samples;
  r.median_ms = median_of(samples);
  r.min_ms = *std::min_element(samples.begin(), samples.end());
  r.mean_ms = std::accumulate(samples.begin(), samples.end(), 0.0) / samples.size();
  return r;
}

double median_host_us(int iters, const std::function<void()>& call,
                      const std::function<void()>& between_groups) {
  constexpr int kGroup = 16;
  std::vector<double> us;
  us.reserve(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    if (i % kGroup == 0 && between_groups) between_groups();
    auto t0 = Clock::now();
    call();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return median_of(us);
}

}  // namespace mlakit_bench
