// Grow-only, 64-byte aligned host scratch for the CPU kernels (one per thread or per run): a
// cache line per row start, and no reallocation once the largest problem has been seen.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace mlakit {
namespace cpu {

template <typename T>
struct AlignedScratch {
  T* data = nullptr;
  size_t size = 0;  // elements
  AlignedScratch() = default;
  AlignedScratch(const AlignedScratch&) = delete;
  AlignedScratch& operator=(const AlignedScratch&) = delete;
  ~AlignedScratch() { std::free(data); }
  // At least n elements; the old contents are not kept when it grows.
  T* ensure(size_t n) {
    if (n > size) {
      std::free(data);
      // std::aligned_alloc needs a size that is a multiple of the alignment.
      data = static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64));
      if (data == nullptr) {
        size = 0;
        throw std::bad_alloc();
      }
      size = n;
    }
    return data;
  }
};

}  // namespace cpu
}  // namespace mlakit
