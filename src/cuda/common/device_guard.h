// Makes a device current for a scope (the launch entry points take a device index).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/cuda_check.h"

namespace mlakit {
namespace cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    MLAKIT_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != index) MLAKIT_CUDA_CHECK(cudaSetDevice(index));
    index_ = index;
  }
  ~DeviceGuard() {
    if (prev_ != index_) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0, index_ = 0;
};

}  // namespace cuda
}  // namespace mlakit
