// Plain-C++ seam over the few CUDA runtime calls the host side needs (memory, copies, stream and
// event sync, device queries). Implemented in runtime_cuda.cc with <cuda_runtime.h>, stubbed in
// src/cuda/no_cuda.cc, so src/core compiles the same with or without CUDA.
// Every function throws mlakit::Error(kRuntime) on a CUDA failure, except where noted.
#pragma once

#include <cstddef>
#include <string>

#include "mlakit/tensor.h"

namespace mlakit {
namespace cuda_rt {

// Number of usable devices; 0 (and *why set, if given) when none or no driver. Never throws.
int device_count(std::string* why);
// "NVIDIA H200 (sm_90, 132 SMs)".
std::string device_name(int index);

void* alloc_device(size_t bytes, int index);
void free_device(void* p, int index);  // never throws (used from destructors)
// Page-locked host memory; nullptr if it cannot be had (callers fall back to plain memory).
void* alloc_pinned(size_t bytes);
void free_pinned(void* p);  // never throws

// Stream-ordered copy / memset; pointers may live anywhere (unified addressing).
void memcpy_async(void* dst, const void* src, size_t bytes, int device_index, Stream stream);
void memset_async(void* dst, int value, size_t bytes, int device_index, Stream stream);
void stream_synchronize(int device_index, Stream stream);
void device_synchronize(int device_index) noexcept;  // for destructors; ignores errors

// Events guard reuse of host staging buffers: record after an async copy that reads the buffer,
// synchronize on that one event before overwriting it.
using Event = void*;
Event event_create(int device_index);  // created with cudaEventDisableTiming
void event_record(Event e, Stream stream);
void event_synchronize(Event e);  // returns at once if never recorded
void event_destroy(Event e) noexcept;
// Stream capture: the id of the capture `stream` is part of, 0 when it is not capturing. A
// record while capturing becomes a graph node that records the event at every launch.
unsigned long long stream_capture_id(Stream stream);
void event_record_in_capture(Event e, Stream stream);

// Graphs captured from one stream (mlakit::StreamGraph). graph_end returns the instantiated
// executable; on failure it throws with nothing leaked. graph_abort ends a capture (if one is
// under way on `stream`) and discards it, leaving no CUDA error pending; it never throws.
using GraphExec = void*;
void graph_begin(int device_index, Stream stream);
GraphExec graph_end(int device_index, Stream stream);
void graph_abort(int device_index, Stream stream) noexcept;
void graph_launch(int device_index, GraphExec g, Stream stream);
void graph_destroy(GraphExec g) noexcept;

}  // namespace cuda_rt
}  // namespace mlakit
