// One explicit instantiation per translation unit keeps builds parallel and short.
#include "cuda/sm80/prefill_launch_impl.cuh"

namespace mlakit {
namespace cuda {
namespace sm80 {
MLAKIT_INSTANTIATE_SM80(__half, 128, 128)
}  // namespace sm80
}  // namespace cuda
}  // namespace mlakit
