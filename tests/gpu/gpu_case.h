// One GPU prefill check: random inputs on the host, the same inputs on the device, outputs
// poisoned before the run, then compared with the float64 CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "mlakit/mlakit.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {

struct GpuCase {
  std::vector<int32_t> q_lens, kv_lens;
  int heads = 4, kv_heads = 4, dqk = 192, dvo = 128;
  DType dtype = DType::kBF16;
  PrefillOptions opts;
  uint64_t seed = 1;
  // Extra elements at the end of each token row / head row, to test non-contiguous views.
  int q_token_pad = 0;
  // Extra elements at the end of each output head row: the output is a view into
  // [T, H, Dvo + out_pad]. The pad must stay untouched (poisoned). The CUDA backend wants 16-byte
  // strides: a multiple of 8 elements.
  int out_pad = 0;
  KernelPreference kernel = KernelPreference::kAuto;  // which CUDA kernel runs the case
  KvSplitMode kv_split = KvSplitMode::kAuto;          // key-range splitting (sm90)
};

struct CaseResult {
  double out_relerr = 0;
  double lse_max_abs_err = 0;
  int64_t unwritten_or_nan = 0;  // out or lse elements still NaN (poison) or NaN after the run
  int64_t empty_rows_wrong = 0;  // rows with no visible key whose out != 0 or lse != -inf
  int64_t pad_written = 0;       // elements of the output's pad (GpuCase::out_pad) not poison any more
  std::vector<uint8_t> out_bits;  // raw output, for bitwise comparisons between runs
  std::vector<double> out_values; // the output as doubles
  int split_slots = 0;            // PlanInfo::split_slots of the plan that ran
  int grid_blocks = 0;            // PlanInfo::grid_blocks (the persistent grid)
};

inline double tolerance_for(DType t) { return t == DType::kBF16 ? 1e-2 : 2e-3; }

// Runs the case on CUDA device 0 through RaggedPrefill and checks it against the reference.
CaseResult run_gpu_case(const GpuCase& c, int repeats = 1);

std::string describe(const GpuCase& c);

// A config on CUDA device 0 running `kernel`; capacities below 1 become 1 (empty batches).
PrefillConfig cuda_config(int heads, int kv_heads, int dqk, int dvo, DType dtype, int max_batch, int64_t max_q,
                          int64_t max_kv, KernelPreference kernel);

// True when `kernel` can run (dqk, dvo, dtype) on CUDA device 0 in this build; else *why says why.
bool kernel_available(KernelPreference kernel, int dqk, int dvo, DType dtype, std::string* why);

// Every kernel a test must cover, selected explicitly.
inline const KernelPreference kAllKernels[] = {KernelPreference::kSm80, KernelPreference::kSm90};
// Test-name suffix for suites parameterized over kAllKernels ("sm80", "sm90").
inline std::string kernel_param_name(const ::testing::TestParamInfo<KernelPreference>& info) {
  return kernel_preference_name(info.param);
}

}  // namespace test
}  // namespace mlakit

// Skips (printing why) when there is no GPU or the given kernel cannot run this shape here
// (e.g. the sm90 kernel on a device that is not compute capability 9.0).
#define MLAKIT_SKIP_IF_KERNEL_UNAVAILABLE(kernel, dqk, dvo, dtype)                              \
  do {                                                                                          \
    MLAKIT_SKIP_IF_NO_GPU();                                                                    \
    std::string mlakit_kwhy_;                                                                   \
    if (!::mlakit::test::kernel_available(kernel, dqk, dvo, dtype, &mlakit_kwhy_)) {            \
      std::printf("[  SKIPPED ] %s kernel: %s\n", ::mlakit::kernel_preference_name(kernel),     \
                  mlakit_kwhy_.c_str());                                                        \
      std::fflush(stdout);                                                                      \
      GTEST_SKIP() << ::mlakit::kernel_preference_name(kernel) << " kernel: " << mlakit_kwhy_; \
    }                                                                                           \
  } while (0)
