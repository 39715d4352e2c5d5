// 16 bytes at a 16-byte aligned address, loaded or stored as one vector access: the pieces the
// MLA gather's rows and the FP8 row decode move.
#pragma once

#include <cuda_runtime.h>

namespace mlakit {
namespace cuda {

__device__ __forceinline__ uint4 load16(const void* src) { return *static_cast<const uint4*>(src); }
__device__ __forceinline__ void store16(void* dst, uint4 v) { *static_cast<uint4*>(dst) = v; }

}  // namespace cuda
}  // namespace mlakit
