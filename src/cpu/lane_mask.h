// The mask of the first n of 16 lanes (all 16 when n >= 16), for the tails of the CPU backend's
// AVX-512 loops.
#pragma once

#include <cstdint>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

namespace mlakit {
namespace cpu {

inline __mmask16 first_lanes16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n > 0 ? n : 0)) - 1u);
}

}  // namespace cpu
}  // namespace mlakit
#endif
