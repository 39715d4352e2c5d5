// The CUDA side of the MLA ops, in plain C++ over the kernel seam (cuda/mla/mla_launch.h), which
// the no-CUDA build stubs.
#include "mla/cuda/mla_launch.h"
#include "mla/mla_ops.h"

namespace mlakit {
namespace mla {
namespace {

class CudaOps final : public MlaOps {
 public:
  void gather(const GatherArgs& a, Stream s) const override { cuda::mla::launch_gather(a, s); }
};

}  // namespace

std::unique_ptr<MlaOps> make_cuda_ops() { return std::make_unique<CudaOps>(); }

}  // namespace mla
}  // namespace mlakit
