// Kernel launches with Programmatic Dependent Launch (docs/sm90-kernel.md). In a chain of dependent
// kernels (a CUDA graph of gather -> GEMM -> attention per layer) each launch otherwise waits for
// the previous kernel to drain before its blocks are even scheduled: ~1-2 us of idle GPU per
// kernel. With the PDL attribute the next kernel's launch and prologue overlap the previous one's
// tail; the kernel itself waits (griddepcontrol.wait, cuda/common/grid_dependency.cuh) before
// touching memory the previous kernel may produce or still read.
//
// Stream capture records these launches as programmatic graph edges (CUDA 12.3+). After a copy
// or a memset the kernel starts as before; after a kernel that never signals launch_dependents
// (cuBLASLt's, an engine's) it is launched as that kernel's blocks exit.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "mlakit/error.h"

namespace mlakit {
namespace cuda {

// Whether PDL is on for this process: built with MLAKIT_PDL (CMake option, default ON) and
// MLAKIT_DISABLE_PDL not set to a non-empty value other than "0" (read once, at first use).
bool pdl_switched_on();

// Whether a launch of `kernel` on the current device uses PDL: switched on, the device has
// compute capability 9.0+ (queried once per device), and the kernel's code for that device was
// compiled for sm_90+, so it holds the wait (PTX of an older architecture JIT-compiled for a
// newer GPU does not). Cached per (device, kernel); thread-safe.
bool pdl_enabled(const void* kernel);

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute where pdl_enabled().
// Throws mlakit::Error(kRuntime) on a launch failure (what MLAKIT_CUDA_CHECK(cudaGetLastError())
// after <<<>>> did).
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  if (pdl_enabled(reinterpret_cast<const void*>(kernel))) {
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) {
    cudaGetLastError();  // the runtime also keeps it as the last error; it is reported here
    throw Error(ErrorKind::kRuntime, "", std::string("kernel launch (cudaLaunchKernelEx) failed: ") +
                                             cudaGetErrorString(err));
  }
}

}  // namespace cuda
}  // namespace mlakit
