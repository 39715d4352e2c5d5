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

void event_sync(void* e) { check(cudaEventSynchronize(static_cast<cudaEvent_t>(e)), "cudaEventSynchronize"); }

}  // namespace gpu
}  // namespace mlakit_bench
