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

// The inputs of an e4m3 case (GpuCase::fp8):
//   kExactP: q rows of four +-1 entries, k integers in [-2, 2], q_descale and k_descale in {1, 2},
//     sm_scale = ln 2 (when the case sets no scale and no soft cap): every score is an integer
//     in log2 units, so every probability the kernel rounds to e4m3 is a power of two (exact).
//     The kernel's only rounding is then the output's, and the 16-bit tolerance applies: layout,
//     masking or scaling mistakes cannot hide under the FP8 error of P.
//   kNormal: N(0, 1) q, k, v quantized as an engine would: per (sequence, kv head) descale =
//     amax / 448, e4m3 = round(x / descale).
//   kOutliers: the same with four distinct q/k channels and two distinct v channels x 20.
// The last two are compared with the tolerance the FP8 issue sets (3e-2): P rounded to e4m3 costs
// ~2.5% relative on flat attention of random inputs (docs/fp8.md).
enum class Fp8Inputs { kExactP, kNormal, kOutliers };

struct GpuCase {
  std::vector<int32_t> q_lens, kv_lens;
  int heads = 4, kv_heads = 4, dqk = 192, dvo = 128;
  DType dtype = DType::kBF16;
  DType out_dtype = DType::kBF16;        // e4m3 inputs: the output's dtype
  Fp8Inputs fp8 = Fp8Inputs::kExactP;   // e4m3 inputs: which
  bool descales = true;                  // e4m3 inputs: pass descale factors (else none: 1)
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
  // max |lse - ref| / (1 + M) over rows, M the row's bound on |q . k| * scale over its keys
  // (sm_scale * descales * |q| * max |k|, by Cauchy-Schwarz): e4m3 products accumulate in the
  // tensor cores' 13-bit-mantissa format, truncated, so a score's error grows with its terms'
  // magnitude, not with its value (docs/fp8.md).
  double lse_max_scaled_err = 0;
  int64_t unwritten_or_nan = 0;  // out or lse elements still NaN (poison) or NaN after the run
  int64_t empty_rows_wrong = 0;  // rows with no visible key whose out != 0 or lse != -inf
  int64_t pad_written = 0;       // elements of the output's pad (GpuCase::out_pad) not poison any more
  std::vector<uint8_t> out_bits;  // raw output, for bitwise comparisons between runs
  std::vector<double> out_values; // the output as doubles
  int split_slots = 0;            // PlanInfo::split_slots of the plan that ran
  int grid_blocks = 0;            // PlanInfo::grid_blocks (the persistent grid)
  // Where the case errs most, for a failure's message: the (token, head) of the largest LSE
  // error and of the largest output error relative to its row, with the sequence and row.
  std::string worst;
};

inline double tolerance_for(DType t) { return t == DType::kBF16 ? 1e-2 : 2e-3; }
// The case's output tolerance: its dtype's, or for e4m3 inputs the output's when every
// probability is exact (Fp8Inputs::kExactP with the default scale and no soft cap), else 3e-2.
double tolerance_for(const GpuCase& c);

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
