#include "core/plan_staging.h"

#include <string>

#include "mlakit/error.h"

namespace mlakit {
namespace backend {

PlanStaging::PlanStaging(const Backend& b, size_t bytes, size_t scratch, Upload upload)
    : backend_(b), bytes_(bytes), scratch_(scratch), deferred_(upload == Upload::kInRun) {
  owns_ = true;
  host_ = static_cast<uint8_t*>(b.alloc_staging(host_bytes(bytes)));
  try {
    device_ = b.alloc_device(device_bytes(bytes, scratch));
    for (auto& e : events_) e = b.create_event();
    b.zero_device(this->scratch(), scratch);
  } catch (...) {
    for (auto& e : events_) b.destroy_event(e);
    b.free_device(device_);
    b.free_staging(host_);
    throw;
  }
}

PlanStaging::PlanStaging(const Backend& b, size_t bytes, size_t scratch, void* host, void* device)
    : backend_(b), bytes_(bytes), scratch_(scratch), host_(static_cast<uint8_t*>(host)), device_(device) {
  for (auto& e : events_) e = b.create_event();
  b.zero_device(this->scratch(), scratch);
}

PlanStaging::~PlanStaging() {
  // Copies or kernels may still read the workspaces; let them finish before release.
  backend_.drain();
  for (auto& e : events_) backend_.destroy_event(e);
  if (owns_) {
    backend_.free_staging(host_);
    backend_.free_device(device_);
  }
}

uint8_t* PlanStaging::begin() {
  // The half we fill may still be the source of an async copy from two plans ago; that copy was
  // recorded on its event, which has almost always completed by now. Deferred: half 0, whose
  // last upload (eager, or a graph replay's first node: a launch records the event) must have
  // run; only a step planned while the previous one has not started waits here.
  if (deferred_) {
    backend_.wait(events_[0]);
    return host_;
  }
  backend_.wait(events_[next_half_]);
  return host_ + static_cast<size_t>(next_half_) * bytes_;
}

void PlanStaging::publish(size_t used, Stream stream) {
  if (deferred_) {
    pending_ = true;
    return;
  }
  const int half = next_half_;
  backend_.copy_to_device(device_, host_ + static_cast<size_t>(half) * bytes_, used, stream);
  backend_.record(events_[half], stream);
  next_half_ = half ^ 1;
}

void PlanStaging::upload(Stream stream) {
  if (!deferred_) return;
  const unsigned long long capture = backend_.capture_id(stream);
  // Owed: outside a capture, once per plan; inside one, once per capture (its graph's first node).
  if (capture != 0 ? capture == captured_ : !pending_) return;
  backend_.copy_to_device(device_, host_, bytes_, stream);
  if (capture != 0) {
    backend_.record_in_capture(events_[0], stream);
    captured_ = capture;
  } else {
    backend_.record(events_[0], stream);
    pending_ = false;
  }
}

void check_workspace(const void* p, size_t have, size_t want, const char* name) {
  if (p == nullptr) throw Error(ErrorKind::kInvalidArgument, name, "is null");
  if (reinterpret_cast<uintptr_t>(p) % kWorkspaceAlign != 0) {
    throw Error(ErrorKind::kInvalidArgument, name, "must be 256-byte aligned");
  }
  if (have < want) {
    throw Error(ErrorKind::kInvalidArgument, name,
                std::to_string(have) + " bytes is less than the " + std::to_string(want) +
                    " bytes workspace_sizes() asks for");
  }
}

}  // namespace backend
}  // namespace mlakit
