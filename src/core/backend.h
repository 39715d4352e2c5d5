// The backend seam: what the API objects (RaggedPrefill, MlaStep) need from a device, one
// implementation per device type (backend_cpu.cc, backend_cuda.cc), so the API code has no
// `if (cuda)` branches. Callers validate first; a backend assumes valid arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "contract/latent_launch.h"
#include "contract/prefill_launch.h"
#include "mlakit/latent.h"
#include "mlakit/prefill.h"
#include "mlakit/tensor.h"
#include "contract/schedule_layout.h"

namespace mlakit {
namespace backend {

// One schedule block (contract/schedule_layout.h) as it sits in a device workspace.
struct ScheduleRef {
  const void* block = nullptr;  // the block's header, on the backend's device
  plan::ScheduleLayout layout{};
};

// One attention launch over a schedule. K is `k` alone, or split: columns
// [0, Dqk - k_rope_dim) from `k` and the last k_rope_dim columns from `k_rope`
// ([rows, Hkv, k_rope_dim], stride 0 over heads allowed: one row shared by every head).
struct AttentionCall {
  const TensorView* q = nullptr;
  const TensorView* k = nullptr;
  const TensorView* k_rope = nullptr;  // null: plain K
  const TensorView* v = nullptr;
  const TensorView* out = nullptr;
  const TensorView* lse = nullptr;     // null: no LSE
  int head_dim_qk = 0;
  int head_dim_vo = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  DType dtype = DType::kBF16;      // of q, k, v (and k_rope)
  DType out_dtype = DType::kBF16;  // of out (= dtype for 16-bit inputs)
  Descales descales;               // e4m3 inputs: validated descale factors (null = 1)
  ScheduleRef schedule;
  void* scratch = nullptr;  // the kernel's device scratch (KernelChoice::scratch_bytes), zeroed once
};

using Event = void*;

// How a backend runs latent attention (mlakit/latent.h): rows of (token, head) per work item at
// most, and keys per split of a short request's range (config.kv_split_size resolved).
struct LatentChoice {
  int block_rows = 0;
  int split_size = 0;
  // Workers pulling the plan's items (the CUDA kernel's persistent CTAs); 0: a plan's splits
  // stay split_size whatever the batch (LatentPlanOptions::batch_invariant).
  int workers = 0;
  // Rows of the bf16 workspace a plan on an FP8 cache may decode into once
  // (LatentConfig::max_decoded_rows, a multiple of 64; 0: rows are decoded in the kernel only).
  int64_t decoded_rows = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // Tile shape and grid for attention with these dims and dtypes (out_dtype: the output's, read
  // for e4m3 inputs); throws kUnsupported when there is none. `preference` picks among the CUDA
  // kernels (mlakit/prefill.h); the CPU ignores it.
  virtual cuda::KernelChoice choose_kernel(int head_dim_qk, int head_dim_vo, DType dtype, DType out_dtype,
                                           int num_qo_heads, KernelPreference preference) const = 0;

  // The CPU backend: the path its products take for `dtype` inputs writing `out_dtype` ("amx",
  // "avx512bf16", "fp32"; throws for an MLAKIT_CPU_ISA naming none); "" elsewhere.
  virtual const char* cpu_isa(DType, DType) const { return ""; }

  // Workspace memory on the device, and host staging memory (page-locked where it matters).
  virtual void* alloc_device(size_t bytes) const = 0;
  virtual void free_device(void* p) const noexcept = 0;
  virtual void* alloc_staging(size_t bytes) const = 0;
  virtual void free_staging(void* p) const noexcept = 0;

  // Stream-ordered host -> device copy of a published plan (the CPU copies at once).
  virtual void copy_to_device(void* dst, const void* src, size_t bytes, Stream stream) const = 0;
  // Zeroes device memory before this returns (workspace setup, not a hot path).
  virtual void zero_device(void* p, size_t bytes) const = 0;
  // Events guard the reuse of a staging half; the CPU has none (null events, no-ops).
  virtual Event create_event() const = 0;
  virtual void record(Event e, Stream stream) const = 0;
  virtual void wait(Event e) const = 0;
  virtual void destroy_event(Event e) const noexcept = 0;
  // Stream capture (CUDA graphs): the capture `stream` is part of, 0 when none (the CPU: always
  // 0), and a record that becomes a graph node recording `e` at every launch of the graph.
  virtual unsigned long long capture_id(Stream stream) const = 0;
  virtual void record_in_capture(Event e, Stream stream) const = 0;
  // Lets queued work finish before memory it may read is released (destructors).
  virtual void drain() const noexcept = 0;

  virtual void attention(const cuda::KernelChoice& choice, const AttentionCall& call,
                         Stream stream) const = 0;
  // Latent attention: the backend's choice for a checked config, or kUnsupported naming
  // config.device where it has no kernel (a CUDA device without the Hopper kernel: CudaBackend).
  virtual LatentChoice choose_latent(const LatentConfig& config) const;
  // Runs a published latent plan (contract/latent_layout.h) with these arguments.
  virtual void latent_attention(const latent::LatentArgs& args, Stream stream) const;

  // out = merge of (out_a, lse_a) and (out_b, lse_b); see mlakit/merge.h.
  virtual void merge(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                     const TensorView& lse_b, const TensorView& out, const TensorView* lse_out,
                     Stream stream) const = 0;
};

// The backend for `device`. CUDA: throws kUnsupported naming `argument` when the device cannot
// be used (no CUDA build, no GPU, no such index).
std::unique_ptr<Backend> make_backend(Device device, const char* argument);
// make_backend's check of a CUDA device (`device` must be a CUDA one): throws kUnsupported naming
// `argument` unless it is usable here.
void check_cuda_device(Device device, const char* argument);

std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_cuda_backend(int device_index);

}  // namespace backend
}  // namespace mlakit
