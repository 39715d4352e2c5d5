// Stubs of the MLA CUDA seams for builds without CUDA: every entry point throws kUnsupported
// naming "device" (the MLA step never reaches them with a CPU config).
#include "mla/cuda/mla_launch.h"
#include "mla/blas.h"
#include "mlakit/error.h"

namespace mlakit {
namespace {
[[noreturn]] void no_cuda() { throw Error(ErrorKind::kUnsupported, "device", "mlakit was built without CUDA"); }
}  // namespace

namespace cuda {
namespace mla {
void launch_gather(const mlakit::mla::GatherArgs&, Stream) { no_cuda(); }
void launch_gather_fp8(const mlakit::mla::GatherArgs&, Stream) { no_cuda(); }
void launch_copy_rows(const mlakit::mla::RowCopyArgs&, Stream) { no_cuda(); }
}  // namespace mla
namespace blas {
void gemm_nt(const mlakit::blas::GemmArgs&, int, Stream) { no_cuda(); }
void init(int) { no_cuda(); }
void tune(const TuneArgs&, int) { no_cuda(); }
}  // namespace blas
}  // namespace cuda
}  // namespace mlakit
