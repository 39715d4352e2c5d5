// One explicit instantiation per translation unit keeps builds parallel and short.
#include "cuda/sm80/prefill_launch_impl.cuh"

namespace mlakit {
namespace cuda {
MLAKIT_DEFINE_SM80_KERNEL(fp16, 192, 128)
}  // namespace cuda
}  // namespace mlakit
