// The ctest entries isa_<path>.* run the CPU backend's tests with MLAKIT_CPU_ISA set
// (tests/CMakeLists.txt). Where this CPU lacks the forced path, the backend would fall to a lower
// one: those runs skip instead, saying why, so that a pass always means the path named ran.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "cpu/cpu_isa.h"
#include "mlakit/error.h"

namespace {

class ForcedIsaEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    mlakit::cpu::CpuIsa want;
    bool requested = false;
    try {
      requested = mlakit::cpu::cpu_isa_requested(&want);
    } catch (const mlakit::Error&) {
      return;  // an unknown value: the tests themselves report the error
    }
    if (requested && !mlakit::cpu::cpu_isa_available(want)) {
      std::printf("[  SKIPPED ] MLAKIT_CPU_ISA=%s: not available here (%s); the best here is %s\n",
                  mlakit::cpu::cpu_isa_name(want),
                  want == mlakit::cpu::CpuIsa::kAmx ? "the CPU or OS grants no AMX tiles" : "the CPU or OS lacks it",
                  mlakit::cpu::cpu_isa_name(mlakit::cpu::cpu_isa_best()));
      std::fflush(stdout);
      GTEST_SKIP() << "MLAKIT_CPU_ISA=" << mlakit::cpu::cpu_isa_name(want) << " is not available here";
    }
  }
};

::testing::Environment* const g_forced_isa = ::testing::AddGlobalTestEnvironment(new ForcedIsaEnvironment);

}  // namespace
