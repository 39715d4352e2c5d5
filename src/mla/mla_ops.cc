// Picks the MLA ops of a device: plain row copies on the CPU (mla_ops_cpu.cc) or the CUDA
// gather kernel (mla_ops_cuda.cc).
#include "mla/mla_ops.h"

namespace mlakit {
namespace mla {

std::unique_ptr<MlaOps> make_cpu_ops();
std::unique_ptr<MlaOps> make_cuda_ops();

std::unique_ptr<MlaOps> make_ops(Device device) {
  if (device.is_cpu()) return make_cpu_ops();
  return make_cuda_ops();
}

}  // namespace mla
}  // namespace mlakit
