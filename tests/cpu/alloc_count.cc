// The global operator new of the CPU test binary, counting per thread while an AllocCounter is
// alive (alloc_count.h). Every form forwards to malloc / free, so nothing else changes.
#include "alloc_count.h"

#include <cstdlib>
#include <new>

namespace {
thread_local bool g_counting = false;
thread_local int64_t g_allocs = 0;

void* counted(std::size_t n) {
  if (g_counting) ++g_allocs;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return counted(n); }
void* operator new[](std::size_t n) { return counted(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace mlakit {
namespace test {

AllocCounter::AllocCounter() : start_(g_allocs), was_counting_(g_counting) { g_counting = true; }
AllocCounter::~AllocCounter() { g_counting = was_counting_; }
int64_t AllocCounter::count() const { return g_allocs - start_; }

}  // namespace test
}  // namespace mlakit
