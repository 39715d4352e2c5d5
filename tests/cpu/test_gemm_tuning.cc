// The host rules of the up-projection GEMM's tuning (src/mla/gemm_tuning.h): which class a row
// count falls in, which classes a capacity tunes, and which timed candidate is kept.
#include <gtest/gtest.h>

#include <vector>

#include "mla/gemm_tuning.h"

namespace mlakit {
namespace blas {
namespace {

TEST(GemmTuning, ClassesAreHalfOctavesFrom256) {
  EXPECT_EQ(gemm_m_class(1), 256);
  EXPECT_EQ(gemm_m_class(256), 256);
  EXPECT_EQ(gemm_m_class(257), 384);
  EXPECT_EQ(gemm_m_class(384), 384);
  EXPECT_EQ(gemm_m_class(385), 512);
  EXPECT_EQ(gemm_m_class(999), 1024);
  EXPECT_EQ(gemm_m_class(1025), 1536);
  EXPECT_EQ(gemm_m_class(8192), 8192);
  EXPECT_EQ(gemm_m_class(9191), 12288);
  // Every m lies in (previous class, its class]: the class only changes right after a class value,
  // and a class is at most 1.5x the one before it (a tuned algorithm covers a narrow band).
  int64_t prev = gemm_m_class(1);
  for (int64_t m = 2; m <= 70000; ++m) {
    const int64_t c = gemm_m_class(m);
    ASSERT_GE(c, m);
    if (c != prev) {
      ASSERT_EQ(prev, m - 1) << m;
      ASSERT_LE(2 * c, 3 * prev) << c << " after " << prev;
      prev = c;
    }
  }
}

TEST(GemmTuning, CapacityReachesEveryRunTimeClass) {
  EXPECT_TRUE(gemm_classes_up_to(0).empty());
  const std::vector<GemmClass> small = gemm_classes_up_to(100);
  ASSERT_EQ(small.size(), 1u);
  EXPECT_EQ(small[0].m_class, 256);
  EXPECT_EQ(small[0].timed_m, 100);  // never timed beyond the caller's buffers
  for (int64_t cap : {256, 300, 1024, 9191, 40000}) {
    const std::vector<GemmClass> cls = gemm_classes_up_to(cap);
    ASSERT_FALSE(cls.empty());
    for (size_t i = 0; i < cls.size(); ++i) {
      EXPECT_LE(cls[i].timed_m, cap);
      EXPECT_EQ(cls[i].timed_m, std::min(cls[i].m_class, cap));
      if (i > 0) EXPECT_EQ(cls[i].m_class, gemm_m_class(cls[i - 1].m_class + 1));
    }
    for (int64_t m = 1; m <= cap; m += 37) {
      bool found = false;
      for (const GemmClass& c : cls) found = found || c.m_class == gemm_m_class(m);
      ASSERT_TRUE(found) << "m " << m << " capacity " << cap;
    }
  }
}

TEST(GemmTuning, PickKeepsTheFirstChoiceUnlessClearlyBeaten) {
  EXPECT_EQ(pick_gemm_candidate({}), 0u);
  EXPECT_EQ(pick_gemm_candidate({1.0}), 0u);
  EXPECT_EQ(pick_gemm_candidate({1.0, 0.99}), 0u);         // within the 2% margin: noise
  EXPECT_EQ(pick_gemm_candidate({1.0, 0.95, 0.90}), 2u);   // the fastest
  EXPECT_EQ(pick_gemm_candidate({1.0, -1.0, 0.97}), 2u);   // a failed candidate never wins
  EXPECT_EQ(pick_gemm_candidate({1.0, -1.0}), 0u);
  EXPECT_EQ(pick_gemm_candidate({-1.0, 2.0, 1.5}), 2u);     // the first failed: the fastest that ran
  EXPECT_EQ(pick_gemm_candidate({1.0, 0.9}, 0.2), 0u);     // a wider margin
}

}  // namespace
}  // namespace blas
}  // namespace mlakit
