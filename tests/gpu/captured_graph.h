// A CUDA graph captured from the work a test enqueues on a stream, replayed by launch() after the
// test re-plans and reloads inputs, and destroyed with the object (also when an assertion ends
// the test early). Every graph test checks the same thing: one capture, replayed over plans it
// was not captured with. It calls CUDA's capture directly, as an engine's own capture (PyTorch's)
// does, and hands out the cudaGraph_t for checks of its edges; mlakit::StreamGraph, the library's
// wrapper for callers without one, has its own test (test_mla_step_cuda.cc).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <utility>

namespace mlakit {
namespace test {

class CapturedGraph {
 public:
  CapturedGraph() = default;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }

  // Captures what `work` enqueues on `stream` (thread-local capture mode: another thread's
  // stray synchronizing call does not invalidate it) and instantiates it:
  //   ASSERT_TRUE(g.capture(stream, [&] { step.run(..., stream); }));
  template <class Work>
  ::testing::AssertionResult capture(cudaStream_t stream, Work&& work) {
    if (graph_ || exec_) return ::testing::AssertionFailure() << "captured twice";
    cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return ::testing::AssertionFailure() << "begin capture: " << cudaGetErrorString(e);
    std::forward<Work>(work)();
    e = cudaStreamEndCapture(stream, &graph_);
    if (e != cudaSuccess) return ::testing::AssertionFailure() << "end capture: " << cudaGetErrorString(e);
    e = cudaGraphInstantiate(&exec_, graph_, 0);
    if (e != cudaSuccess) return ::testing::AssertionFailure() << "instantiate: " << cudaGetErrorString(e);
    return ::testing::AssertionSuccess();
  }

  cudaGraph_t graph() const { return graph_; }
  cudaError_t launch(cudaStream_t stream) const { return cudaGraphLaunch(exec_, stream); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace test
}  // namespace mlakit
