// The CUDA side of the MLA ops, in plain C++ over the kernel seam (cuda/mla/mla_launch.h), which
// the no-CUDA build stubs.
#include "mla/cuda/mla_launch.h"
#include "mla/mla_ops.h"
#include "mlakit/error.h"

namespace mlakit {
namespace mla {
namespace {

class CudaOps final : public MlaOps {
 public:
  void gather(const GatherArgs& a, Stream s) const override {
    if (a.cache.format == KvCacheDtype::kAuto) cuda::mla::launch_gather(a, s);
    else cuda::mla::launch_gather_fp8(a, s);
  }
  void copy_rows(const RowCopyArgs& a, Stream s) const override { cuda::mla::launch_copy_rows(a, s); }
  // Never reached: MlaStep refuses fp8_attention on CUDA at construction (mla_step.cc).
  void quantize_fp8(const Fp8Args&, Stream) const override {
    throw Error(ErrorKind::kUnsupported, "config.fp8_attention", "the MLA step's FP8 attention runs on the CPU only");
  }
};

}  // namespace

std::unique_ptr<MlaOps> make_cuda_ops() { return std::make_unique<CudaOps>(); }

}  // namespace mla
}  // namespace mlakit
