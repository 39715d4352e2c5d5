// The kernel-selection rules over made-up tables: preference, architecture, shape, and the
// argument each refusal names.
#include <gtest/gtest.h>

#include "plan/kernel_select.h"

namespace mlakit {
namespace {

using cuda::KernelEntry;
using plan::KernelRequest;
using plan::select_kernel;

void fake_launch(const cuda::PrefillArgs&, int, Stream) {}
int fake_occupancy() { return 1; }

KernelEntry entry(const char* name, int arch, DType t, int dqk, int dvo) {
  return KernelEntry{name, arch, t, dqk, dvo, 128, arch == 90 ? 128 : 64, arch == 90 ? 1 : 0, 0, 0,
                     arch == 90 ? size_t{4096} : size_t{0}, &fake_launch, &fake_occupancy};
}

struct Table {
  KernelEntry sm90_bf16 = entry("sm90_bf16_192x128", 90, DType::kBF16, 192, 128);
  KernelEntry sm80_bf16 = entry("sm80_bf16_192x128", 80, DType::kBF16, 192, 128);
  KernelEntry sm80_small = entry("sm80_bf16_64x64", 80, DType::kBF16, 64, 64);
  const KernelEntry* ptrs[3] = {&sm80_bf16, &sm90_bf16, &sm80_small};  // order must not matter
};

TEST(KernelSelect, AutoPrefersHopperKernelOnHopper) {
  Table t;
  auto s = select_kernel(t.ptrs, 3, KernelRequest{90, DType::kBF16, 192, 128, KernelPreference::kAuto});
  ASSERT_NE(s.entry, nullptr);
  EXPECT_EQ(s.entry, &t.sm90_bf16);
}

TEST(KernelSelect, AutoFallsBackToSm80ElsewhereAndForOtherShapes) {
  Table t;
  for (int arch : {80, 86, 89, 100, 120}) {
    auto s = select_kernel(t.ptrs, 3, KernelRequest{arch, DType::kBF16, 192, 128, KernelPreference::kAuto});
    ASSERT_NE(s.entry, nullptr) << arch;
    EXPECT_EQ(s.entry, &t.sm80_bf16) << "sm_90a code must not run on compute capability " << arch;
  }
  auto s = select_kernel(t.ptrs, 3, KernelRequest{90, DType::kBF16, 64, 64, KernelPreference::kAuto});
  ASSERT_NE(s.entry, nullptr);
  EXPECT_EQ(s.entry, &t.sm80_small);
}

TEST(KernelSelect, ForcedPreferenceIsHonouredOrRefusedNamingConfigKernel) {
  Table t;
  auto s80 = select_kernel(t.ptrs, 3, KernelRequest{90, DType::kBF16, 192, 128, KernelPreference::kSm80});
  EXPECT_EQ(s80.entry, &t.sm80_bf16);
  auto s90 = select_kernel(t.ptrs, 3, KernelRequest{90, DType::kBF16, 192, 128, KernelPreference::kSm90});
  EXPECT_EQ(s90.entry, &t.sm90_bf16);

  auto off = select_kernel(t.ptrs, 3, KernelRequest{80, DType::kBF16, 192, 128, KernelPreference::kSm90});
  EXPECT_EQ(off.entry, nullptr);
  EXPECT_STREQ(off.argument, "config.kernel");
  EXPECT_NE(off.why.find("9.0"), std::string::npos) << off.why;

  auto shape = select_kernel(t.ptrs, 3, KernelRequest{90, DType::kBF16, 64, 64, KernelPreference::kSm90});
  EXPECT_EQ(shape.entry, nullptr);
  EXPECT_STREQ(shape.argument, "config.kernel");
  EXPECT_NE(shape.why.find("sm90"), std::string::npos) << shape.why;
}

TEST(KernelSelect, UnknownShapeOrDtypeNamesHeadDim) {
  Table t;
  auto s = select_kernel(t.ptrs, 3, KernelRequest{90, DType::kFP16, 192, 128, KernelPreference::kAuto});
  EXPECT_EQ(s.entry, nullptr);
  EXPECT_STREQ(s.argument, "config.head_dim_qk");
  auto none = select_kernel(nullptr, 0, KernelRequest{90, DType::kBF16, 192, 128, KernelPreference::kAuto});
  EXPECT_EQ(none.entry, nullptr);
  EXPECT_STREQ(none.argument, "config.head_dim_qk");
}

// e4m3 kernels are chosen by their output dtype too; 16-bit requests ignore out_dtype.
TEST(KernelSelect, E4M3KernelsMatchTheOutputDtype) {
  KernelEntry fp8 = entry("sm90_e4m3_192x128", 90, DType::kE4M3, 192, 128);
  fp8.out_dtype = DType::kBF16;
  KernelEntry bf16 = entry("sm90_bf16_192x128", 90, DType::kBF16, 192, 128);
  const KernelEntry* ptrs[2] = {&bf16, &fp8};
  auto s = select_kernel(ptrs, 2, KernelRequest{90, DType::kE4M3, 192, 128, KernelPreference::kAuto, DType::kBF16});
  EXPECT_EQ(s.entry, &fp8);
  auto fp16_out =
      select_kernel(ptrs, 2, KernelRequest{90, DType::kE4M3, 192, 128, KernelPreference::kAuto, DType::kFP16});
  EXPECT_EQ(fp16_out.entry, nullptr);
  EXPECT_STREQ(fp16_out.argument, "config.head_dim_qk");
  EXPECT_NE(fp16_out.why.find("e4m3 -> fp16"), std::string::npos) << fp16_out.why;
  auto plain = select_kernel(ptrs, 2, KernelRequest{90, DType::kBF16, 192, 128, KernelPreference::kAuto, DType::kFP16});
  EXPECT_EQ(plain.entry, &bf16);
  EXPECT_FALSE(plan::kernel_computes(fp8, DType::kE4M3, DType::kFP16, 192, 128));
  EXPECT_TRUE(plan::kernel_computes(fp8, DType::kE4M3, DType::kBF16, 192, 128));
}

TEST(KernelSelect, PreferenceNames) {
  EXPECT_STREQ(kernel_preference_name(KernelPreference::kAuto), "auto");
  EXPECT_STREQ(kernel_preference_name(KernelPreference::kSm80), "sm80");
  EXPECT_STREQ(kernel_preference_name(KernelPreference::kSm90), "sm90");
}

}  // namespace
}  // namespace mlakit
