// A CUDA graph of the work enqueued on one stream between begin_capture() and end_capture() (an
// MlaStep's layer loop, a RaggedPrefill::run), replayed with launch(): one cudaGraphLaunch, no
// framework in between. For callers that replay mlakit's work on its own (a C++ engine, or Python
// through mlakit.StreamGraph, where MlaStep.plan(..., replay=graph) plans and launches in one
// native call); engines that capture their whole model with PyTorch need none of this.
#pragma once

#include <memory>

#include "mlakit/tensor.h"

namespace mlakit {

class StreamGraph {
 public:
  // Throws kUnsupported unless `device` is a usable CUDA device.
  explicit StreamGraph(Device device);
  ~StreamGraph();
  StreamGraph(const StreamGraph&) = delete;
  StreamGraph& operator=(const StreamGraph&) = delete;

  // Starts capturing `stream` (thread-local mode; not the legacy default stream: kInvalidArgument).
  // Everything enqueued on it until end_capture() is recorded, not run.
  void begin_capture(Stream stream);
  // Ends the capture and instantiates the graph (replacing any earlier one); on a failed capture
  // throws kRuntime and keeps the earlier graph.
  void end_capture();
  // Ends the capture and discards what it recorded (after an error inside it); the earlier graph,
  // if any, stays. Never throws.
  void abort_capture() noexcept;
  // Enqueues one replay on `stream`. kInvalidArgument before a capture has ended.
  void launch(Stream stream) const;
  bool captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlakit
