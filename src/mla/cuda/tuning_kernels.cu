// Device helpers of the up-projection GEMM's timing (gemm_algos.cc, time_candidates): the values
// candidates are timed on, and a kernel that holds the stream while the timed calls are enqueued.
//
// The values, why not a constant: a tensor core's power draw depends on how many input bits
// toggle, and the GPU runs long GEMMs under its power cap (docs/performance.md), so a
// constant input (few toggling bits, low power) can rank candidates differently from the real
// latents and weights. Random signs and mantissas over a few octaves toggle like real data; every
// value is a finite normal number, so no candidate is timed on NaN, infinity or denormals.
// The hold: a small GEMM runs faster than the host enqueues it (at m 256 the timing
// read 10.6 us per call enqueued as it went, 5.3 us behind the hold).
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/ptx.cuh"
#include "mla/cuda/gemm_algos.h"

namespace mlakit {
namespace cuda {
namespace blas {
namespace {

__device__ __forceinline__ uint32_t mix32(uint32_t x) {  // an integer hash (murmur3's finalizer)
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}

// bf16: 8 exponent bits (bias 127), 7 mantissa bits; fp16: 5 (bias 15), 10. Exponents
// bias-4 .. bias-1: magnitudes in [1/16, 1).
__global__ void fill_kernel(uint16_t* p, int64_t n, uint32_t seed, int mant_bits, int bias) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t h = mix32(static_cast<uint32_t>(i) ^ mix32(seed + static_cast<uint32_t>(i >> 32)));
    const uint32_t sign = h >> 31;
    const uint32_t exponent = static_cast<uint32_t>(bias - 4) + ((h >> 28) & 3u);
    const uint32_t mantissa = h & ((1u << mant_bits) - 1u);
    p[i] = static_cast<uint16_t>((sign << 15) | (exponent << mant_bits) | mantissa);
  }
}

__global__ void hold_kernel(uint32_t ns) {
  const uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < ns) __nanosleep(1000);
}

}  // namespace

void hold_stream(uint32_t microseconds, cudaStream_t stream) {
  hold_kernel<<<1, 1, 0, stream>>>(microseconds * 1000u);
  MLAKIT_CUDA_CHECK(cudaGetLastError());
}

void fill_tuning_values(void* p, int64_t count, DType dtype, uint32_t seed, cudaStream_t stream) {
  if (count <= 0) return;
  const bool bf16 = dtype == DType::kBF16;
  const int threads = 256;
  const int64_t want = (count + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 4096 ? want : 4096);
  fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<uint16_t*>(p), count, seed, bf16 ? 7 : 10,
                                              bf16 ? 127 : 15);
  MLAKIT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace blas
}  // namespace cuda
}  // namespace mlakit
