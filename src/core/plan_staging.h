// Workspaces and staging of a published plan: a device workspace of `bytes` and two host staging
// halves of the same size. plan() fills one half (begin()), then publish() copies its used
// prefix into the device workspace with one stream-ordered copy and flips to the other half, so
// the next plan() never waits for a copy still in flight (except one from two plans ago, guarded
// by an event). Several schedule blocks and metadata arrays may share one workspace: the caller
// lays them out at fixed offsets and publishes the prefix that covers what it wrote.
//
// Deferred upload (Upload::kInRun): plan() makes no copy. It fills half 0 only, after waiting
// for the upload that last read it; the first run() after it calls upload() on its stream, which
// copies the whole half (a fixed size, so a captured copy fits every later plan). A run() being
// captured into a CUDA graph records the copy as the graph's first node (once per capture), so
// each replay uploads the plan in force when it runs and the host's work per step is plan() plus
// one graph launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/backend.h"

namespace mlakit {
namespace backend {

constexpr size_t kWorkspaceAlign = 256;

class PlanStaging {
 public:
  // Host staging needs 2 * bytes; the device workspace `bytes`, then `scratch` bytes of kernel
  // scratch (KernelChoice::scratch_bytes) at a 256-byte boundary.
  static size_t host_bytes(size_t bytes) { return 2 * bytes; }
  static size_t device_bytes(size_t bytes, size_t scratch) { return bytes + (scratch + 255) / 256 * 256; }

  enum class Upload { kInPlan, kInRun };

  // Allocates both workspaces through `b`. The scratch is zeroed here, once.
  PlanStaging(const Backend& b, size_t bytes, size_t scratch, Upload upload = Upload::kInPlan);
  // Uses caller memory (already checked for size and alignment); it must outlive this object.
  PlanStaging(const Backend& b, size_t bytes, size_t scratch, void* host, void* device);
  ~PlanStaging();
  PlanStaging(const PlanStaging&) = delete;
  PlanStaging& operator=(const PlanStaging&) = delete;

  // The staging half to fill next (waits until the copy that last read it is done).
  uint8_t* begin();
  // Copies bytes [0, used) of the half from begin() into the device workspace on `stream`
  // (kInRun: marks the plan as not yet uploaded instead).
  void publish(size_t used, Stream stream);
  // kInRun, called by every run() before its launches: enqueues the upload on `stream` when the
  // current plan has not been uploaded yet, or when `stream` is being captured and this capture
  // has no upload yet. No-op for kInPlan.
  void upload(Stream stream);

  const uint8_t* device() const { return static_cast<const uint8_t*>(device_); }
  uint8_t* device_mut() const { return static_cast<uint8_t*>(device_); }
  size_t bytes() const { return bytes_; }
  // The kernel's scratch (null when it needs none): after the published blocks, never copied over.
  void* scratch() const { return scratch_ > 0 ? device_mut() + bytes_ : nullptr; }

 private:
  const Backend& backend_;
  size_t bytes_;
  size_t scratch_;
  uint8_t* host_ = nullptr;
  void* device_ = nullptr;
  bool owns_ = false;
  Event events_[2] = {nullptr, nullptr};
  int next_half_ = 0;
  bool deferred_ = false;             // Upload::kInRun
  bool pending_ = false;              // kInRun: planned, not yet uploaded outside a capture
  unsigned long long captured_ = 0;   // kInRun: the last capture that recorded an upload
};

// Throws kInvalidArgument naming `name` unless p is non-null, 256-byte aligned and has >= want bytes.
void check_workspace(const void* p, size_t have, size_t want, const char* name);

}  // namespace backend
}  // namespace mlakit
