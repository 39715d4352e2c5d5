// Ragged (variable-length, batched) prefill attention with a plan/run split.
//
//   q   [total_q,  H,   Dqk]      k [total_kv, Hkv, Dqk]      v [total_kv, Hkv, Dvo]
//   out [total_q,  H,   Dvo]  (input dtype; PrefillConfig::out_dtype for e4m3 inputs)
//   lse [total_q,  H]         (float32, natural log; optional)
//
// dtypes: q, k, v (and k_rope) share one dtype: bf16, fp16 or e4m3 (FP8, DType::kE4M3). FP8
// attention takes optional float32 descale factors [batch, Hkv], one per (sequence, kv head), as
// FlashAttention-3 does (Descales below): the scores are (q . k) * q_descale * k_descale * sm_scale
// and the output is softmax(...) . v * v_descale, i.e. attention of the dequantized inputs
// q * q_descale, k * k_descale, v * v_descale. Its output is bf16 or fp16 (out_dtype).
//
// Sequence b owns q rows [qo_indptr[b], qo_indptr[b+1]) and kv rows [kv_indptr[b], kv_indptr[b+1]).
// H must be a multiple of Hkv (grouped-query attention: q head h reads kv head h / (H/Hkv)).
//
// Masking, for query i (0-based) of a sequence with lengths (lq, lk):
//   causal:  keys j <= lk - lq + i are visible (aligned bottom-right, as FA2 and FlashInfer do);
//   window_left = w >= 0: keys j >= lk - lq + i - w are visible (sliding window);
//   logits_soft_cap = c > 0: s = c * tanh(s / c), applied after scaling by sm_scale.
// A query row that sees no key gets out = 0 and lse = -inf.
//
// plan() runs on the host from host-side indptr arrays, never synchronizes the device, and copies
// the schedule (with the indptr arrays and the options) into the device workspace asynchronously
// on the given stream. run() only launches; it reads everything that varies per batch from the
// workspace, so a run() captured in a CUDA graph can be replayed after plan() is called again with
// new lengths (as long as the tensors' pointers and strides stay the same and the new batch fits
// the capacity given at construction).
#pragma once

#include <cstdint>
#include <memory>

#include "mlakit/tensor.h"

namespace mlakit {

struct PrefillOptions {
  bool causal = false;
  float sm_scale = 0.0f;          // 0 => 1 / sqrt(head_dim_qk)
  int window_left = -1;           // -1 => no sliding window
  float logits_soft_cap = 0.0f;   // 0 => no soft cap
};

// Which CUDA kernel a RaggedPrefill runs. kAuto: the Hopper kernel (wgmma + TMA, built for
// sm_90a) on compute capability 9.0 when it covers the head dims and dtype, else the sm80
// (mma.sync) kernel, which runs on every GPU of compute capability 8.0 or newer. kSm80 / kSm90
// force one (tests and benchmarks select each explicitly); construction throws kUnsupported,
// naming config.kernel, when the forced kernel cannot run this config on this device.
// Ignored by the CPU backend.
enum class KernelPreference : int32_t { kAuto = 0, kSm80 = 1, kSm90 = 2 };
const char* kernel_preference_name(KernelPreference p);  // "auto", "sm80", "sm90"

// Splitting a q tile's key range in two halves run on two SMs and merged by log-sum-exp in a
// fixed order (the sm90 kernel; the sm80 kernel and the CPU backend never split). Two rules
// (src/plan/kv_split.h):
//   - small sequences: a sequence with fewer (q tile, head) items than the kernel's persistent
//     blocks splits its long q tiles;
//   - the tail rule: a non-causal sequence of at most 32 heads that alone fills the grid at
//     least 4 times over, whose last round of items would leave SMs idle, splits its last
//     q tile and runs the halves after every whole item (1x32768 at 16 heads: the launch ends
//     after 31.5 rounds of items instead of 32).
// Whether and where a sequence splits depends only on its own lengths (docs/sm90-kernel.md), so
// outputs stay bitwise the same run to run and whether a sequence runs alone or inside any
// batch. The halves' partial results need device workspace sized for the capacity: about
// 68 KiB per split (q tile, head) slot; small sequences: at most min(max_batch x (SMs - 1),
// max tiles x heads) slots; the tail rule: heads slots per sequence of >= 4 x SMs / heads q
// tiles the capacity holds (16 heads: 1.1 MiB at max_q_tokens 8192, 33 MiB at 131072; 32 heads:
// 6.5 MiB at 8192, 134 MiB at 131072; kOff sizes none).
//   kAuto: the library's choice: the tail rule only (the small-sequence rule measured slower
//          on every workload tried: 1x999 0.033 ms split, 0.023 ms not; docs/performance.md);
//   kOn:   both rules (for measuring and for future kernels);   kOff: never.
enum class KvSplitMode : int32_t { kAuto = 0, kOn = 1, kOff = 2 };
const char* kv_split_mode_name(KvSplitMode m);  // "auto", "on", "off"

// Fixed at construction: the problem's static shape and the capacity of every buffer.
struct PrefillConfig {
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim_qk = 192;
  int head_dim_vo = 128;
  DType dtype = DType::kBF16;   // of q, k, v: bf16, fp16 or e4m3
  // The output's dtype for e4m3 inputs: bf16 or fp16. 16-bit inputs write their own dtype and
  // ignore this field.
  DType out_dtype = DType::kBF16;
  int max_batch = 0;            // largest batch plan() will be given
  int64_t max_q_tokens = 0;     // largest sum of q lengths
  int64_t max_kv_tokens = 0;    // largest sum of kv lengths
  Device device = Device::cpu();  // where run() executes
  KernelPreference kernel = KernelPreference::kAuto;  // CUDA only
  KvSplitMode kv_split = KvSplitMode::kAuto;          // CUDA sm90 only
};

struct WorkspaceSizes {
  size_t host_bytes = 0;    // host staging (pinned memory recommended for CUDA)
  size_t device_bytes = 0;  // on config.device (host memory for the CPU backend)
};

// What the last plan() decided, for tools and tests.
struct PlanInfo {
  int batch_size = 0;
  int64_t total_q = 0;
  int64_t total_kv = 0;
  int num_tiles = 0;        // (sequence, q-tile) pairs; each runs once per q head
  int block_m = 0;          // q rows per tile
  int block_n = 0;          // kv rows per inner step
  int grid_blocks = 0;      // persistent blocks run() launches (fixed per object)
  int64_t visible_pairs = 0;  // (query, key) pairs that are not masked, summed over the batch (per head)
  int kernel_arch = 0;      // 0: CPU backend; 80 or 90: the CUDA kernel run() launches
  bool kv_split = false;    // this object splits key ranges (PrefillConfig::kv_split resolved)
  int split_slots = 0;      // (q tile, head) pairs this plan runs as two halves of the key range
  // CPU backend: the products run() takes for this config's dtype, "amx", "avx512bf16" or "fp32"
  // (mlakit/runtime.h, LibraryInfo); "" for the CUDA kernels. A static string.
  const char* cpu_isa = "";
};

// FP8 (e4m3) descale factors, as FlashAttention-3 takes them: each a float32 tensor
// [>= batch, Hkv] on the config's device (any strides), entry [b, h] the factor of sequence b's
// kv head h (and of the q heads that read it); null = 1. Only e4m3 inputs take them. Their
// pointers and strides are read by run(), their values when the kernel runs, so one buffer sized
// for max_batch serves every plan, and a run() captured into a CUDA graph reads the values the
// buffer holds at each replay (batch index b of the plan in force).
struct Descales {
  const TensorView* q = nullptr;
  const TensorView* k = nullptr;
  const TensorView* v = nullptr;
};

class RaggedPrefill {
 public:
  static WorkspaceSizes workspace_sizes(const PrefillConfig& config);

  // Allocates its own workspaces (pinned host + device memory for CUDA).
  explicit RaggedPrefill(const PrefillConfig& config);
  // Uses caller-provided workspaces of at least workspace_sizes(config) bytes, 256-byte aligned;
  // they must outlive this object. device_workspace lives on config.device.
  RaggedPrefill(const PrefillConfig& config, void* host_workspace, size_t host_bytes,
                void* device_workspace, size_t device_bytes);
  ~RaggedPrefill();
  RaggedPrefill(const RaggedPrefill&) = delete;
  RaggedPrefill& operator=(const RaggedPrefill&) = delete;

  // qo_indptr and kv_indptr are host arrays of batch_size + 1 int32 values, monotone, starting at 0.
  // On a rejected call the previous plan stays in force.
  void plan(const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
            const PrefillOptions& options = {}, Stream stream = nullptr);

  // Launches attention for the current plan. lse may be null. Throws (and writes nothing) if the
  // tensors do not match the config or the plan (token counts, heads, dims, dtype, device).
  void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
           const TensorView* lse = nullptr, Stream stream = nullptr) const;
  // The same with descale factors (e4m3 inputs only; see Descales).
  void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
           const TensorView* lse, const Descales& descales, Stream stream = nullptr) const;

  // The same with K split in two column ranges, as MLA keeps it: k [total_kv, Hkv, Dqk - R]
  // (per head, e.g. the up-projected "nope" part) and k_rope [total_kv, R] shared by every head
  // (or [total_kv, 1 or Hkv, R]; a head stride of 0 broadcasts). Key column j < Dqk - R comes
  // from k, the rest from k_rope; no [total_kv, Hkv, Dqk] K is ever materialized. R must be a
  // multiple of 8.
  void run_split_k(const TensorView& q, const TensorView& k, const TensorView& k_rope,
                   const TensorView& v, const TensorView& out, const TensorView* lse = nullptr,
                   Stream stream = nullptr) const;
  // The same with descale factors (e4m3 inputs only): descales.k applies to both parts of K.
  void run_split_k(const TensorView& q, const TensorView& k, const TensorView& k_rope,
                   const TensorView& v, const TensorView& out, const TensorView* lse,
                   const Descales& descales, Stream stream = nullptr) const;

  const PrefillConfig& config() const;
  const PrefillOptions& options() const;  // of the current plan
  PlanInfo info() const;
  bool planned() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One-shot convenience: builds a plan sized for this batch and runs it. Allocates each call;
// engines should keep a RaggedPrefill instead.
void ragged_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                    const int32_t* qo_indptr_host, const int32_t* kv_indptr_host, int batch_size,
                    const PrefillOptions& options, const TensorView& out,
                    const TensorView* lse = nullptr, Stream stream = nullptr);

}  // namespace mlakit
