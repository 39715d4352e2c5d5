// Timing for mlakit-bench, in one place so the method can be swapped (e.g. for CUDA events once
// mlakit exposes event helpers) without touching the rest of the tool.
//
// Method today (no CUDA headers in tools): every sample runs `launches_per_sample` launches
// back to back, then synchronizes the device and reads a host steady_clock. Per-launch time =
// sample time / launches_per_sample. On CUDA, launches_per_sample is calibrated so one sample
// lasts about 1 ms, which amortizes the synchronize round trip (tens of µs) that would otherwise
// inflate short kernels; it still includes launch gaps, so short workloads read slightly slow.
#pragma once

#include <functional>
#include <vector>

#include "mlakit/tensor.h"

namespace mlakit_bench {

struct TimingResult {
  double median_ms = 0.0;  // per launch
  double min_ms = 0.0;
  double mean_ms = 0.0;
  int samples = 0;
  std::vector<double> sample_ms;  // per launch, in the order taken
  int warmup_launches = 0;        // count-based and time-based warm-up launches together
  int launches_per_sample = 1;
  const char* method = "";  // short description, recorded in the JSON
};

// Runs `warmup` launches, then `iters` timed samples. launch(i) is called with a running launch
// index (callers use it to rotate input sets); it must only enqueue work on `stream`.
// between_samples, if set, runs before each sample outside its timed interval, and the device is
// synchronized after it (probes of what state a launch starts from: an idle gap, a flushed L2).
// warmup_ms > 0 keeps launching after the `warmup` launches until that much wall time has passed:
// a GPU under load holds its clock for tens of milliseconds before its power cap lowers it, so a
// count of warm-ups leaves long workloads' samples on either side of that change.
TimingResult time_launches(mlakit::Device device, mlakit::Stream stream, int warmup, int iters,
                           const std::function<void(int)>& launch,
                           const std::function<void()>& between_samples = nullptr, double warmup_ms = 0.0);

// Host time of one call, in microseconds (for plan() cost). Median over `iters` calls; between
// groups of calls the device is synchronized outside the timed region so queued async copies do
// not pile up.
double median_host_us(int iters, const std::function<void()>& call,
                      const std::function<void()>& between_groups);

double median_of(std::vector<double> v);

}  // namespace mlakit_bench
