// Programmatic Dependent Launch, device side (docs/sm90-kernel.md): the two griddepcontrol instructions
// every mlakit kernel uses. A kernel launched with PDL (cuda/common/pdl_launch.h) may start while
// the previous kernel in the stream is still running, so it must wait before its first global
// read or write of anything that kernel may produce or still read.
//
// Both are no-ops when the kernel was not launched with PDL, and compile to nothing for sm_80
// (PTX 7.8, sm_90+ only) or with MLAKIT_PDL=0. The host launches with PDL only kernels whose
// loaded code was compiled for sm_90+, so a kernel JIT-compiled from sm_80 PTX (no wait in it)
// is never launched early.
#pragma once

#if (!defined(MLAKIT_PDL) || MLAKIT_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MLAKIT_PDL_DEVICE 1
#else
#define MLAKIT_PDL_DEVICE 0
#endif

namespace mlakit {
namespace cuda {

// Blocks the calling thread until the grids this one depends on have completed and their
// memory is visible to it. Every thread that touches such memory calls it (or is ordered after
// one that did by a barrier); mlakit's kernels call it in every thread of every block, so a
// grid never completes before its predecessor has, and the dependency chains through a stream.
__device__ __forceinline__ void pdl_wait() {
#if MLAKIT_PDL_DEVICE
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel's blocks be scheduled once every block of this grid has called it (or
// exited). Always memory-safe: the dependent's pdl_wait still waits for this grid's completion
// and memory flush; calling it early only lets the dependent's blocks take SMs as they free up.
// Once per block is enough (later calls have no effect).
__device__ __forceinline__ void pdl_launch_dependents() {
#if MLAKIT_PDL_DEVICE
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace cuda
}  // namespace mlakit
