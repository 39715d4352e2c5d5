// CUDA runtime errors become mlakit::Error(kRuntime) with the failing call and location.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "mlakit/error.h"

#define MLAKIT_CUDA_CHECK(expr)                                                          \
  do {                                                                                   \
    cudaError_t mlakit_err_ = (expr);                                                    \
    if (mlakit_err_ != cudaSuccess) {                                                    \
      throw ::mlakit::Error(::mlakit::ErrorKind::kRuntime, "",                           \
                            std::string(#expr) + " failed: " +                           \
                                cudaGetErrorString(mlakit_err_) + " (" + __FILE__ + ":" + \
                                std::to_string(__LINE__) + ")");                         \
    }                                                                                    \
  } while (0)
