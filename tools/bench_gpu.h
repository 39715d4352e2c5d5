// The few CUDA runtime services mlakit-bench's seed workload needs beyond the public API: a
// stream, events for device time (and a host wait on one), free device memory. bench_gpu_cuda.cc implements them
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

// A host wait on an event (the host-call probe, seed --host-probe). Graphs: mlakit::StreamGraph;
// memory and copies: mlakit/runtime.h.
void event_sync(void* e);

}  // namespace gpu
}  // namespace mlakit_bench
