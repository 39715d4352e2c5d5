// CUDA runtime calls behind cuda/common/host_sync.h. Plain C++ against <cuda_runtime.h>;
// compiled only when the CUDA backends are built (no_cuda.cc stubs these otherwise).
#include <cuda_runtime.h>

#include <string>

#include "cuda/common/host_sync.h"
#include "mlakit/error.h"

namespace mlakit {
namespace cuda_rt {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(ErrorKind::kRuntime, "", std::string(what) + " failed: " + cudaGetErrorString(e));
  }
}

// The CUDA runtime's current device is per host thread; set it for calls that allocate or
// enqueue, so a caller's cuda:1 tensor never lands on device 0.
void use_device(int index) {
  int cur = -1;
  check(cudaGetDevice(&cur), "cudaGetDevice");
  if (cur != index) check(cudaSetDevice(index), "cudaSetDevice");
}

cudaStream_t as_stream(Stream s) { return static_cast<cudaStream_t>(s); }
}  // namespace

int device_count(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it so the next unrelated call does not report it
    if (why) {
      // Without a GPU the runtime usually reports a driver problem; say what that means here.
      const bool no_driver = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice;
      *why = std::string(no_driver ? "no NVIDIA GPU or driver on this machine" : "CUDA unusable") +
             " (cudaGetDeviceCount: " + cudaGetErrorString(e) + ")";
    }
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device found (cudaGetDeviceCount returned 0)";
  return n;
}

std::string device_name(int index) {
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
  return std::string(p.name) + " (sm_" + std::to_string(p.major * 10 + p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs)";
}

void* alloc_device(size_t bytes, int index) {
  use_device(index);
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}

void free_device(void* p, int index) {
  if (!p) return;
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != index) cudaSetDevice(index);
  cudaFree(p);
}

void* alloc_pinned(size_t bytes) {
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void free_pinned(void* p) {
  if (p) cudaFreeHost(p);
}

void memcpy_async(void* dst, const void* src, size_t bytes, int device_index, Stream stream) {
  use_device(device_index);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)), "cudaMemcpyAsync");
}

void memset_async(void* dst, int value, size_t bytes, int device_index, Stream stream) {
  use_device(device_index);
  check(cudaMemsetAsync(dst, value, bytes, as_stream(stream)), "cudaMemsetAsync");
}

void stream_synchronize(int device_index, Stream stream) {
  use_device(device_index);
  check(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
}

void device_synchronize(int device_index) noexcept {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != device_index) cudaSetDevice(device_index);
  cudaDeviceSynchronize();
}

Event event_create(int device_index) {
  use_device(device_index);
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return static_cast<Event>(e);
}

void event_record(Event e, Stream stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(e), as_stream(stream)), "cudaEventRecord");
}

void event_synchronize(Event e) {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(e)), "cudaEventSynchronize");
}

unsigned long long stream_capture_id(Stream stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  check(cudaStreamGetCaptureInfo(as_stream(stream), &status, &id), "cudaStreamGetCaptureInfo");
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

void event_record_in_capture(Event e, Stream stream) {
  check(cudaEventRecordWithFlags(static_cast<cudaEvent_t>(e), as_stream(stream), cudaEventRecordExternal),
        "cudaEventRecordWithFlags");
}

void graph_begin(int device_index, Stream stream) {
  use_device(device_index);
  check(cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

GraphExec graph_end(int device_index, Stream stream) {
  use_device(device_index);
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaStreamEndCapture(as_stream(stream), &g);
  if (e != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();  // leave no error for the caller's next CUDA call to find
    check(e, "cudaStreamEndCapture");
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  if (e != cudaSuccess) {
    cudaGetLastError();
    check(e, "cudaGraphInstantiate");
  }
  // Upload now, so the first launch costs what every later one does.
  e = cudaGraphUpload(exec, as_stream(stream));
  if (e != cudaSuccess) {
    cudaGraphExecDestroy(exec);
    cudaGetLastError();
    check(e, "cudaGraphUpload");
  }
  return static_cast<GraphExec>(exec);
}

void graph_abort(int device_index, Stream stream) noexcept {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != device_index) cudaSetDevice(device_index);
  cudaGraph_t g = nullptr;
  if (cudaStreamEndCapture(as_stream(stream), &g) == cudaSuccess && g) cudaGraphDestroy(g);
  cudaGetLastError();
}

void graph_launch(int device_index, GraphExec g, Stream stream) {
  // The stream handle may be 0 (the legacy stream of the current device): launch on the graph's.
  use_device(device_index);
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(g), as_stream(stream)), "cudaGraphLaunch");
}

void graph_destroy(GraphExec g) noexcept {
  if (g) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
}

void event_destroy(Event e) noexcept {
  if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

}  // namespace cuda_rt
}  // namespace mlakit
