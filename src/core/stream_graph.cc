// mlakit::StreamGraph: stream capture and replay through the CUDA seam (cuda/common/host_sync.h),
// so this file compiles the same with or without CUDA (without it, construction is refused).
#include "mlakit/graph.h"

#include <string>

#include "core/backend.h"
#include "cuda/common/host_sync.h"
#include "mlakit/error.h"

namespace mlakit {

struct StreamGraph::Impl {
  int device = 0;
  cuda_rt::GraphExec exec = nullptr;
  Stream capturing = nullptr;
  bool in_capture = false;
};

StreamGraph::StreamGraph(Device device) : impl_(std::make_unique<Impl>()) {
  if (!device.is_cuda()) throw Error(ErrorKind::kUnsupported, "device", "StreamGraph needs a CUDA device");
  backend::check_cuda_device(device, "device");
  impl_->device = device.index;
}

StreamGraph::~StreamGraph() {
  abort_capture();  // never leave the stream capturing
  cuda_rt::graph_destroy(impl_->exec);
}

void StreamGraph::begin_capture(Stream stream) {
  if (stream == nullptr)
    throw Error(ErrorKind::kInvalidArgument, "stream",
                "the legacy default stream cannot be captured; capture on a stream of your own");
  if (impl_->in_capture) throw Error(ErrorKind::kInvalidArgument, "stream", "a capture is already under way");
  cuda_rt::graph_begin(impl_->device, stream);
  impl_->capturing = stream;
  impl_->in_capture = true;
}

void StreamGraph::end_capture() {
  if (!impl_->in_capture) throw Error(ErrorKind::kInvalidArgument, "stream", "end_capture() without begin_capture()");
  cuda_rt::GraphExec g = nullptr;
  try {
    g = cuda_rt::graph_end(impl_->device, impl_->capturing);
  } catch (...) {
    cuda_rt::graph_abort(impl_->device, impl_->capturing);  // the stream must not stay capturing
    impl_->in_capture = false;
    throw;
  }
  impl_->in_capture = false;
  cuda_rt::graph_destroy(impl_->exec);
  impl_->exec = g;
}

void StreamGraph::abort_capture() noexcept {
  if (!impl_->in_capture) return;
  impl_->in_capture = false;
  cuda_rt::graph_abort(impl_->device, impl_->capturing);
}

void StreamGraph::launch(Stream stream) const {
  if (impl_->exec == nullptr) throw Error(ErrorKind::kInvalidArgument, "graph", "launch() before a capture ended");
  cuda_rt::graph_launch(impl_->device, impl_->exec, stream);
}

bool StreamGraph::captured() const { return impl_->exec != nullptr; }

}  // namespace mlakit
