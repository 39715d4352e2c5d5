// The BLAS seam's dispatcher: the CPU side (blas_cpu.cc) or cuBLASLt (cuda/blas_cublas.cc).
#include "mla/blas.h"

namespace mlakit {
namespace blas {

void gemm_nt(const GemmArgs& g, Device device, Stream stream) {
  if (g.m == 0) return;
  if (device.is_cpu()) {
    gemm_nt_cpu(g);
  } else {
    cuda::blas::gemm_nt(g, device.index, stream);
  }
}

}  // namespace blas
}  // namespace mlakit
