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
void capture_begin(mlakit::Stream) { none(); }
void* capture_end(mlakit::Stream) { none(); }
void graph_launch(void*, mlakit::Stream) { none(); }
void graph_destroy(void*) {}
void* pinned_alloc(size_t) { none(); }
void pinned_free(void*) {}
void* device_alloc(size_t) { none(); }
void device_free(void*) {}
void copy_h2d_async(void*, const void*, size_t, mlakit::Stream) { none(); }
void event_sync(void*) { none(); }

}  // namespace gpu
}  // namespace mlakit_bench
