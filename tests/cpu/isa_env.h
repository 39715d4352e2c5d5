// Sets MLAKIT_CPU_ISA for one scope and puts back what was there (the per-path ctest entries run
// the CPU tests with it set).
#pragma once

#include <cstdlib>
#include <string>

namespace mlakit {
namespace test {

class IsaEnv {
 public:
  explicit IsaEnv(const char* value) {
    const char* old = std::getenv("MLAKIT_CPU_ISA");
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) setenv("MLAKIT_CPU_ISA", value, 1);
    else unsetenv("MLAKIT_CPU_ISA");
  }
  ~IsaEnv() {
    if (had_) setenv("MLAKIT_CPU_ISA", old_.c_str(), 1);
    else unsetenv("MLAKIT_CPU_ISA");
  }
  IsaEnv(const IsaEnv&) = delete;
  IsaEnv& operator=(const IsaEnv&) = delete;

 private:
  bool had_ = false;
  std::string old_;
};

}  // namespace test
}  // namespace mlakit
