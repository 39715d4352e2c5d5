// The few CUDA runtime services mlakit-bench's seed workload needs beyond the public API: a
// stream, events for device time, and graph capture/replay. bench_gpu_cuda.cc implements them
// with the CUDA runtime; bench_gpu_none.cc (builds without CUDA) reports them unavailable.
#pragma once

#include <cstddef>

#include "mlakit/tensor.h"

namespace mlakit_bench {
namespace gpu {

bool available();  // false in builds without CUDA
mlakit::Stream stream_create();
void stream_destroy(mlakit::Stream s);
void stream_sync(mlakit::Stream s);

void* event_create();
void event_record(void* e, mlakit::Stream s);
float event_elapsed_ms(void* start, void* end);  // both recorded and completed
void event_destroy(void* e);

// Free device memory (cudaMemGetInfo): what graph captures take shows as the drop around them.
size_t device_free_bytes();

// Everything enqueued on `s` between begin and end becomes one graph; end returns its executable.
void capture_begin(mlakit::Stream s);
void* capture_end(mlakit::Stream s);
void graph_launch(void* exec, mlakit::Stream s);
void graph_destroy(void* exec);

// For the host-call probe (seed --host-probe): page-locked host memory, device memory, an async
// host-to-device copy and a host wait on an event, the calls a plan's upload is made of.
void* pinned_alloc(size_t bytes);
void pinned_free(void* p);
void* device_alloc(size_t bytes);
void device_free(void* p);
void copy_h2d_async(void* dst, const void* src, size_t bytes, mlakit::Stream s);
void event_sync(void* e);

}  // namespace gpu
}  // namespace mlakit_bench
