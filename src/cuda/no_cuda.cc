// Stubs for a build without the CUDA backends: nothing reports a device, every CUDA entry point
// throws kUnsupported naming "device", so CPU-only builds link and fail loudly only if asked
// for CUDA work.
#include <string>

#include "cuda/common/host_sync.h"
#include "contract/latent_launch.h"
#include "contract/prefill_launch.h"
#include "mlakit/error.h"

namespace mlakit {

namespace {
[[noreturn]] void no_cuda() {
  throw Error(ErrorKind::kUnsupported, "device", "mlakit was built without CUDA");
}
}  // namespace

namespace cuda {

const KernelEntry* const* kernel_table(int* count) {
  *count = 0;
  return nullptr;
}
bool prefill_supported(int, int, DType, DType) { return false; }
KernelChoice choose_prefill_kernel(int, int, DType, DType, int, Device, KernelPreference) { no_cuda(); }
void launch_prefill(const KernelChoice&, int, int, DType, DType, const PrefillArgs&, Stream) { no_cuda(); }
void launch_merge(DType, const MergeArgs&, Stream) { no_cuda(); }
bool latent_kernel_available(int, std::string* why) {
  *why = "mlakit was built without CUDA";
  return false;
}
int latent_grid(int) { return 0; }
void launch_latent(const latent::LatentArgs&, int, Stream) { no_cuda(); }

}  // namespace cuda

namespace cuda_rt {

int device_count(std::string* why) {
  if (why) *why = "built without CUDA";
  return 0;
}
std::string device_name(int) { no_cuda(); }
void* alloc_device(size_t, int) { no_cuda(); }
void free_device(void*, int) {}
void* alloc_pinned(size_t) { return nullptr; }
void free_pinned(void*) {}
void memcpy_async(void*, const void*, size_t, int, Stream) { no_cuda(); }
void memset_async(void*, int, size_t, int, Stream) { no_cuda(); }
void stream_synchronize(int, Stream) { no_cuda(); }
void device_synchronize(int) noexcept {}
Event event_create(int) { no_cuda(); }
void event_record(Event, Stream) { no_cuda(); }
void event_synchronize(Event) { no_cuda(); }
void event_destroy(Event) noexcept {}
unsigned long long stream_capture_id(Stream) { return 0; }
void event_record_in_capture(Event, Stream) { no_cuda(); }
void graph_begin(int, Stream) { no_cuda(); }
GraphExec graph_end(int, Stream) { no_cuda(); }
void graph_abort(int, Stream) noexcept {}
void graph_launch(int, GraphExec, Stream) { no_cuda(); }
void graph_destroy(GraphExec) noexcept {}

}  // namespace cuda_rt
}  // namespace mlakit
