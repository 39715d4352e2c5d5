// Counting heap allocations of the calling thread inside a scope, for tests of code that must not
// allocate (the MLA plan on the host). alloc_count.cc replaces the global operator new of the
// CPU test binary; outside a scope it only forwards to malloc.
#pragma once

#include <cstdint>

namespace mlakit {
namespace test {

class AllocCounter {
 public:
  AllocCounter();
  ~AllocCounter();
  AllocCounter(const AllocCounter&) = delete;
  AllocCounter& operator=(const AllocCounter&) = delete;
  // Allocations by this thread since construction.
  int64_t count() const;

 private:
  int64_t start_;
  bool was_counting_;
};

}  // namespace test
}  // namespace mlakit
