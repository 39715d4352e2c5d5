// Definition of launch_prefill_sm80 and of a kernel-table entry, included by one .cu per
// (dtype, head dims) instantiation (see src/cuda/kernel_list.h).
#pragma once

#include <mutex>

#include "cuda/common/cuda_check.h"
#include "cuda/common/dtype_traits.cuh"
#include "cuda/common/pdl_launch.h"
#include "cuda/kernel_list.h"
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
  launch_kernel(kernel, grid_blocks, Shape::THREADS, Shape::kSmemBytes, stream, args);
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

template <typename T, int DQK, int DVO>
void launch_entry(const PrefillArgs& args, int grid_blocks, Stream stream) {
  launch_prefill_sm80<T, DQK, DVO>(args, grid_blocks, static_cast<cudaStream_t>(stream));
}

}  // namespace sm80

// Defines the table entry of one sm80 kernel (and so instantiates it). plan() writes the entry's
// tile into the schedule header, and the entry's tile is the kernel's compile-time shape. (A
// device-side check of the header costs this 255-register kernel a spill on sm_80; the sm90
// kernel checks it on the device.)
#define MLAKIT_DEFINE_SM80_KERNEL(tag, DQK, DVO)                                                  \
  extern const KernelEntry MLAKIT_KERNEL_ENTRY_NAME(sm80, tag, DQK, DVO) = {                      \
      "sm80_" #tag "_" #DQK "x" #DVO,                                                             \
      80,                                                                                         \
      DTypeOf<MLAKIT_ELEM_##tag>::value,                                                          \
      DQK,                                                                                        \
      DVO,                                                                                        \
      sm80::KernelShape<DQK, DVO>::BM,                                                            \
      sm80::KernelShape<DQK, DVO>::BN,                                                            \
      0 /* ScheduleKind::kTilesLongestFirst */,                                                   \
      0,                                                                                          \
      0,                                                                                          \
      0 /* no split key ranges */,                                                                \
      &sm80::launch_entry<MLAKIT_ELEM_##tag, DQK, DVO>,                                           \
      &sm80::blocks_per_sm_sm80<MLAKIT_ELEM_##tag, DQK, DVO>};

}  // namespace cuda
}  // namespace mlakit
