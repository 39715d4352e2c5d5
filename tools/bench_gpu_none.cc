#include <stdexcept>

#include "bench_gpu.h"

namespace mlakit_bench {
namespace gpu {
namespace {
[[noreturn]] void none() { throw std::runtime_error("mlakit-bench was built without CUDA"); }
}  // namespace

bool available() { return false; }
mlakit::Stream stream_create() { none(); }
void stream_destroy(mlakit::Stream) {}
void stream_sync(mlakit::Stream) { none(); }
void* event_create() { none(); }
void event_record(void*, mlakit::Stream) { none(); }
float event_elapsed_ms(void*, void*) { none(); }
void event_destroy(void*) {}
size_t device_free_bytes() { none(); }
void event_sync(void*) { none(); }

}  // namespace gpu
}  // namespace mlakit_bench
