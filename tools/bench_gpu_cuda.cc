#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "bench_gpu.h"

namespace mlakit_bench {
namespace gpu {
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
cudaStream_t cs(mlakit::Stream s) { return static_cast<cudaStream_t>(s); }
}  // namespace

bool available() { return true; }

mlakit::Stream stream_create() {
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}
void stream_destroy(mlakit::Stream s) { cudaStreamDestroy(cs(s)); }
void stream_sync(mlakit::Stream s) { check(cudaStreamSynchronize(cs(s)), "cudaStreamSynchronize"); }

void* event_create() {
  cudaEvent_t e;
  check(cudaEventCreate(&e), "cudaEventCreate");
  return e;
}
void event_record(void* e, mlakit::Stream s) { check(cudaEventRecord(static_cast<cudaEvent_t>(e), cs(s)), "cudaEventRecord"); }
float event_elapsed_ms(void* a, void* b) {
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(a), static_cast<cudaEvent_t>(b)), "cudaEventElapsedTime");
  return ms;
}
void event_destroy(void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }

size_t device_free_bytes() {
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  return free_b;
}

void capture_begin(mlakit::Stream s) {
  check(cudaStreamBeginCapture(cs(s), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}
void* capture_end(mlakit::Stream s) {
  cudaGraph_t g;
  check(cudaStreamEndCapture(cs(s), &g), "cudaStreamEndCapture");
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(g);
  return exec;
}
void graph_launch(void* exec, mlakit::Stream s) {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), cs(s)), "cudaGraphLaunch");
}
void graph_destroy(void* exec) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)); }

void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes), "cudaMallocHost");
  return p;
}
void pinned_free(void* p) { cudaFreeHost(p); }
void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}
void device_free(void* p) { cudaFree(p); }
void copy_h2d_async(void* dst, const void* src, size_t bytes, mlakit::Stream s) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cs(s)), "cudaMemcpyAsync");
}
void event_sync(void* e) { check(cudaEventSynchronize(static_cast<cudaEvent_t>(e)), "cudaEventSynchronize"); }

}  // namespace gpu
}  // namespace mlakit_bench
