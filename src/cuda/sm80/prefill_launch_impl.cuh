// Definition of launch_prefill_sm80, included by one .cu per (dtype, head dims) instantiation.
#pragma once

#include <mutex>

#include "cuda/common/cuda_check.h"
#include "cuda/sm80/prefill_kernel.cuh"

namespace mlakit {
namespace cuda {
namespace sm80 {

template <typename T, int DQK, int DVO>
void launch_prefill_sm80(const PrefillArgs& args, int grid_blocks, cudaStream_t stream) {
  using Shape = KernelShape<DQK, DVO>;
  auto kernel = prefill_sm80_kernel<T, Shape>;
  // Raising the dynamic shared-memory limit is per device; one call per process is enough for
  // the single-device use here, and std::call_once keeps it thread-safe.
  static std::once_flag once;
  std::call_once(once, [&] {
    MLAKIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           Shape::kSmemBytes));
  });
  kernel<<<grid_blocks, Shape::THREADS, Shape::kSmemBytes, stream>>>(args);
  MLAKIT_CUDA_CHECK(cudaGetLastError());
}

// Resident blocks per multiprocessor, for sizing the persistent grid.
template <typename T, int DQK, int DVO>
int blocks_per_sm_sm80() {
  using Shape = KernelShape<DQK, DVO>;
  auto kernel = prefill_sm80_kernel<T, Shape>;
  MLAKIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         Shape::kSmemBytes));
  int blocks = 0;
  MLAKIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Shape::THREADS,
                                                                  Shape::kSmemBytes));
  return blocks;
}

#define MLAKIT_INSTANTIATE_SM80(T, DQK, DVO)                                                \
  template void launch_prefill_sm80<T, DQK, DVO>(const PrefillArgs&, int, cudaStream_t); \
  template int blocks_per_sm_sm80<T, DQK, DVO>();

}  // namespace sm80
}  // namespace cuda
}  // namespace mlakit
