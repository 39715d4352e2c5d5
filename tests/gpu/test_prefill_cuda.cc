// The CUDA prefill kernels against the float64 CPU reference, on fresh random inputs with
// poisoned outputs. Each test skips with a printed reason when no GPU is present.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <tuple>

#include "gpu/gpu_case.h"
#include "plan/kv_split.h"

namespace mlakit {
namespace test {
namespace {

void expect_case_ok(const GpuCase& c, int repeats = 1) {
  const CaseResult r = run_gpu_case(c, repeats);
  const std::string what = describe(c);
  std::printf("[   CASE   ] %s: relerr %.3e lse_abs %.3e\n", what.c_str(), r.out_relerr,
              r.lse_max_abs_err);
  EXPECT_EQ(r.unwritten_or_nan, 0) << what;
  EXPECT_EQ(r.empty_rows_wrong, 0) << what;
  EXPECT_EQ(r.pad_written, 0) << what;
  EXPECT_LE(r.out_relerr, tolerance_for(c)) << what << "; " << r.worst;
  EXPECT_LE(r.lse_max_abs_err, 2e-2) << what << "; " << r.worst;
}

// (Dqk, Dvo, dtype, kernel): every correctness test runs against each kernel, selected
// explicitly; a kernel that cannot run here (the sm90 one off Hopper) skips with the reason.
using KernelCase = std::tuple<int, int, DType, KernelPreference>;

class CudaPrefill : public ::testing::TestWithParam<KernelCase> {
 protected:
  void SetUp() override {
    const auto [dqk, dvo, dtype, kernel] = GetParam();
    MLAKIT_SKIP_IF_KERNEL_UNAVAILABLE(kernel, dqk, dvo, dtype);
  }
  GpuCase base(uint64_t seed) const {
    GpuCase c;
    std::tie(c.dqk, c.dvo, c.dtype, c.kernel) = GetParam();
    c.seed = seed;
    return c;
  }
};

TEST_P(CudaPrefill, RaggedLengthsCausalAndNot) {
  std::mt19937_64 rng(std::random_device{}());
  for (bool causal : {false, true}) {
    GpuCase c = base(rng());
    // 0, 1, odd, exactly one tile, just over a tile, several tiles.
    c.q_lens = {0, 1, 7, 128, 129, 300, 64, 255};
    c.kv_lens = c.q_lens;
    c.opts.causal = causal;
    expect_case_ok(c);
  }
}

TEST_P(CudaPrefill, LengthsAroundEveryTileBoundary) {
  // Tiles: 128 q rows (both kernels), 64 (sm80) or 128 (sm90) keys; one below, at and above
  // each multiple of 64 up to 256, q and kv lengths both ways round.
  std::mt19937_64 rng(std::random_device{}());
  for (bool causal : {false, true}) {
    GpuCase c = base(rng());
    c.q_lens = {63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257};
    c.kv_lens = {65, 64, 63, 129, 128, 127, 193, 192, 191, 257, 256, 255};
    c.opts.causal = causal;
    expect_case_ok(c);
  }
}

TEST_P(CudaPrefill, CausalQueryShorterThanKv) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c = base(rng());
  c.q_lens = {1, 33, 200, 129, 0};
  c.kv_lens = {50, 100, 520, 129, 17};  // context before the new tokens
  c.opts.causal = true;
  expect_case_ok(c);
}

TEST_P(CudaPrefill, CausalQueryLongerThanKvHasEmptyRows) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c = base(rng());
  c.q_lens = {40, 150, 3};
  c.kv_lens = {10, 0, 1};  // rows before the diagonal see no key: out 0, lse -inf
  c.opts.causal = true;
  expect_case_ok(c);
}

TEST_P(CudaPrefill, GroupedQueryHeads) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c = base(rng());
  c.heads = 8;
  c.kv_heads = 2;
  c.q_lens = {77, 130};
  c.kv_lens = {200, 130};
  c.opts.causal = true;
  expect_case_ok(c);
}

TEST_P(CudaPrefill, SlidingWindowSoftCapAndScale) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c = base(rng());
  c.q_lens = {300, 5, 129};
  c.kv_lens = {300, 90, 200};
  c.opts.causal = true;
  c.opts.window_left = 70;
  c.opts.logits_soft_cap = 5.0f;
  c.opts.sm_scale = 0.3f;
  expect_case_ok(c);
  c.opts.causal = false;
  c.opts.window_left = 100;
  c.opts.logits_soft_cap = 0.f;
  c.seed = rng();
  expect_case_ok(c);
}

// Windows wider than two kv tiles: a q tile then walks masked tiles at the window's edge, unmasked
// tiles inside it and (causal) masked tiles at the diagonal, so a kernel that picks the unmasked
// softmax by tile index (the sm90 kernel finds that range once per q tile) must get both ends of
// the range right. Lengths put the window's edge and the diagonal at, just past and inside tile
// boundaries; q shorter than kv moves the diagonal off the tile grid.
TEST_P(CudaPrefill, WideWindowUnmaskedTilesInside) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c = base(rng());
  c.q_lens = {1000, 700, 257, 129};
  c.kv_lens = {1000, 1023, 600, 129};
  for (int window : {300, 385, 517}) {
    for (bool causal : {true, false}) {
      c.opts.causal = causal;
      c.opts.window_left = window;
      c.seed = rng();
      expect_case_ok(c);
    }
  }
}

TEST_P(CudaPrefill, StridedQueryView) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c = base(rng());
  c.q_token_pad = 64;  // q is a view into [T, H, Dqk + 64]
  c.q_lens = {100, 257};
  c.kv_lens = {100, 257};
  c.opts.causal = true;
  expect_case_ok(c);
}

// The output as a view with padded head rows (pad 64: 128-byte aligned rows; pad 8: 16-byte
// aligned only, the least the CUDA backend accepts). The sm90 epilogue stores whole 64-row halves
// of a tile with TMA and the rest from registers; every element of the view must be written,
// nothing of the pad, and nothing of a neighbouring sequence (lengths that end inside a 64-row
// half, at a half and at a tile).
TEST_P(CudaPrefill, StridedOutputView) {
  std::mt19937_64 rng(std::random_device{}());
  for (int pad : {64, 8}) {
    GpuCase c = base(rng());
    c.out_pad = pad;
    c.q_lens = {100, 257, 64, 128, 1, 191};
    c.kv_lens = {100, 300, 64, 128, 1, 191};
    c.opts.causal = true;
    expect_case_ok(c);
    c.opts.causal = false;
    c.seed = rng();
    expect_case_ok(c);
  }
}

TEST_P(CudaPrefill, BitwiseStableAcrossRuns) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c = base(rng());
  c.q_lens = {500, 31, 260};
  c.kv_lens = {700, 31, 260};
  c.opts.causal = true;
  const CaseResult a = run_gpu_case(c, 1);
  const CaseResult b = run_gpu_case(c, 3);
  EXPECT_EQ(a.out_bits, b.out_bits) << describe(c);
  EXPECT_LE(a.out_relerr, tolerance_for(c));
}

// Split key ranges (plan/kv_split.h): plans that split agree with plans that do not, both match
// the reference, and splitting really happened on the kernel that splits (sm90). Cases: one
// short prompt (the 1x999 workload at 16 heads), a ragged causal batch with q shorter than kv and
// a sequence whose first rows see no key, GQA, non-causal context against new tokens, soft cap.
TEST_P(CudaPrefill, SplitKeyRangesMatchUnsplitPlans) {
  std::mt19937_64 rng(std::random_device{}());
  struct Shape {
    std::vector<int32_t> q, kv;
    int heads, kv_heads;
    bool causal;
    float cap;
  };
  const std::vector<Shape> shapes = {
      {{999}, {999}, 16, 16, true, 0.f},
      {{1, 600, 130, 513}, {1000, 900, 1100, 513}, 8, 8, true, 0.f},
      {{700, 300}, {650, 1300}, 12, 2, true, 0.f},  // 700 > 650: the first 50 rows see no key
      {{256}, {2048}, 16, 16, false, 0.f},
      {{999}, {999}, 16, 16, true, 30.f},
  };
  for (const Shape& sh : shapes) {
    GpuCase c = base(rng());
    c.q_lens = sh.q;
    c.kv_lens = sh.kv;
    c.heads = sh.heads;
    c.kv_heads = sh.kv_heads;
    c.opts.causal = sh.causal;
    c.opts.logits_soft_cap = sh.cap;
    c.kv_split = KvSplitMode::kOn;
    const CaseResult split = run_gpu_case(c, 2);  // twice: the slots' counters reset for the next run
    std::printf("[   CASE   ] %s split: relerr %.3e, %d split slots\n", describe(c).c_str(), split.out_relerr,
                split.split_slots);
    c.kv_split = KvSplitMode::kOff;
    const CaseResult whole = run_gpu_case(c);
    EXPECT_EQ(whole.split_slots, 0);
    if (c.kernel == KernelPreference::kSm90) {
      EXPECT_GT(split.split_slots, 0) << describe(c);
    } else {
      EXPECT_EQ(split.split_slots, 0) << "the sm80 kernel never splits";
    }
    for (const CaseResult* r : {&split, &whole}) {
      EXPECT_EQ(r->unwritten_or_nan, 0) << describe(c);
      EXPECT_EQ(r->empty_rows_wrong, 0) << describe(c);
      EXPECT_LE(r->out_relerr, tolerance_for(c)) << describe(c);
      EXPECT_LE(r->lse_max_abs_err, 2e-2) << describe(c);
    }
    // Split against unsplit: the same values up to rounding.
    EXPECT_LE(relative_error(split.out_values, whole.out_values), tolerance_for(c)) << describe(c);
  }
}

// The tail rule (plan/kv_split.h), on by default: a non-causal sequence of >= 4 rounds of items
// whose last round would leave blocks idle runs its last q tile as two halves of its key range,
// after every whole item. 17 q tiles x 32 heads = 544 items (4 rounds of 132 + 16), 5 kv tiles
// (halves of 3 and 2), beside a short neighbour; GQA. Checked against the reference and the
// unsplit plan. sm90 only: the sm80 kernel never splits (SplitKeyRangesMatchUnsplitPlans checks
// that), and the float64 reference of this shape takes seconds per run.
TEST_P(CudaPrefill, TailSplitOfALongNonCausalSequenceMatchesUnsplit) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c = base(rng());
  if (c.kernel != KernelPreference::kSm90) {
    std::printf("[   NOTE   ] %s: the tail rule is the sm90 kernel's; skipped\n", kernel_preference_name(c.kernel));
    GTEST_SKIP() << "the tail rule is the sm90 kernel's";
  }
  c.q_lens = {77, 17 * 128};
  c.kv_lens = {300, 5 * 128 - 9};
  c.heads = 32;
  c.kv_heads = 8;
  c.opts.causal = false;
  c.kv_split = KvSplitMode::kAuto;
  const CaseResult split = run_gpu_case(c, 2);  // twice: the slots' counters reset for the next run
  const plan::KvSplit expect =
      plan::kv_split_for(17 * 128, 5 * 128 - 9, false, -1, 32, 128, 128, plan::KvSplitSettings{0, 1 << 30, split.grid_blocks});
  std::printf("[   CASE   ] %s tail split: relerr %.3e, %d split slots (grid %d, rule: %d)\n", describe(c).c_str(),
              split.out_relerr, split.split_slots, split.grid_blocks, expect.split_tiles * 32);
  EXPECT_EQ(split.split_slots, expect.split_tiles * 32) << describe(c);
  if (split.grid_blocks == 132) EXPECT_EQ(split.split_slots, 32) << "on 132 SMs the rule splits this shape";
  c.kv_split = KvSplitMode::kOff;
  const CaseResult whole = run_gpu_case(c);
  EXPECT_EQ(whole.split_slots, 0);
  for (const CaseResult* r : {&split, &whole}) {
    EXPECT_EQ(r->unwritten_or_nan, 0) << describe(c);
    EXPECT_LE(r->out_relerr, tolerance_for(c)) << describe(c);
    EXPECT_LE(r->lse_max_abs_err, 2e-2) << describe(c);
  }
  EXPECT_LE(relative_error(split.out_values, whole.out_values), tolerance_for(c)) << describe(c);
}

TEST_P(CudaPrefill, SplitPlansBitwiseStableAcrossRuns) {
  std::mt19937_64 rng(std::random_device{}());
  GpuCase c = base(rng());
  c.q_lens = {999, 300};
  c.kv_lens = {999, 1300};
  c.heads = c.kv_heads = 8;
  c.opts.causal = true;
  c.kv_split = KvSplitMode::kOn;
  const CaseResult a = run_gpu_case(c, 1);
  const CaseResult b = run_gpu_case(c, 5);
  EXPECT_EQ(a.out_bits, b.out_bits) << describe(c);
  if (c.kernel == KernelPreference::kSm90) EXPECT_GT(a.split_slots, 0);
}

constexpr KernelPreference kSm80 = KernelPreference::kSm80;
constexpr KernelPreference kSm90 = KernelPreference::kSm90;

INSTANTIATE_TEST_SUITE_P(
    KernelsHeadDimsAndTypes, CudaPrefill,
    ::testing::Values(KernelCase{192, 128, DType::kBF16, kSm90}, KernelCase{192, 128, DType::kFP16, kSm90},
                      KernelCase{128, 128, DType::kBF16, kSm90}, KernelCase{128, 128, DType::kFP16, kSm90},
                      KernelCase{192, 128, DType::kBF16, kSm80}, KernelCase{192, 128, DType::kFP16, kSm80},
                      KernelCase{128, 128, DType::kBF16, kSm80}, KernelCase{128, 128, DType::kFP16, kSm80},
                      KernelCase{64, 64, DType::kBF16, kSm80}, KernelCase{64, 64, DType::kFP16, kSm80},
                      // FP8 (e4m3 -> bf16, sm90 only): every case above with exactly representable
                      // probabilities and descale factors (GpuCase::fp8, Fp8Inputs::kExactP).
                      KernelCase{192, 128, DType::kE4M3, kSm90}, KernelCase{128, 128, DType::kE4M3, kSm90}),
    [](const ::testing::TestParamInfo<KernelCase>& info) {
      return std::string(kernel_preference_name(std::get<3>(info.param))) + "_d" +
             std::to_string(std::get<0>(info.param)) + "x" + std::to_string(std::get<1>(info.param)) + "_" +
             dtype_name(std::get<2>(info.param));
    });

TEST(CudaPrefillLarge, LongCausalSequenceMlaShape) {
  for (KernelPreference k : kAllKernels) {
    SCOPED_TRACE(kernel_preference_name(k));
    std::string why;
    MLAKIT_SKIP_IF_NO_GPU();
    if (!kernel_available(k, 192, 128, DType::kBF16, &why)) {
      std::printf("[   NOTE   ] %s skipped: %s\n", kernel_preference_name(k), why.c_str());
      continue;
    }
    std::mt19937_64 rng(std::random_device{}());
    GpuCase c;
    c.kernel = k;
    c.seed = rng();
    c.heads = 2;
    c.kv_heads = 2;
    c.q_lens = {1500, 999};
    c.kv_lens = {2100, 999};
    c.opts.causal = true;
    expect_case_ok(c);
  }
}

}  // namespace
}  // namespace test
}  // namespace mlakit
