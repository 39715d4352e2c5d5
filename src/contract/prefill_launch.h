// The seam between host logic (src/plan, src/core) and CUDA kernels. Plain C++: no CUDA headers,
// so the planner and the API code compile the same with or without the CUDA backends.
#pragma once

#include <cstdint>

#include "contract/host_device.h"
#include "mlakit/prefill.h"
#include "mlakit/tensor.h"

namespace mlakit {
namespace cuda {

// Arguments that stay fixed across plan() calls (pointers, strides, heads). Per-batch data
// (lengths, schedule, options) is read by the kernel from `schedule` on the device.
struct PrefillArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // may be null
  int64_t q_stride_tok, q_stride_head;
  int64_t k_stride_tok, k_stride_head;
  int64_t v_stride_tok, v_stride_head;
  int64_t o_stride_tok, o_stride_head;
  int64_t lse_stride_tok, lse_stride_head;
  int num_qo_heads;
  int num_kv_heads;
  // K in two column ranges (MLA keeps a per-head "nope" part and one RoPE part shared by all
  // heads, and never materializes [T, H, Dqk]): columns [0, Dqk - k_rope_dim) come from `k`,
  // columns [Dqk - k_rope_dim, Dqk) from `k_rope` at its own strides (kr_stride_head == 0
  // broadcasts one row over every kv head). k_rope_dim == 0: every column from `k`.
  // Kernels that read K in 64-column boxes (sm90) need k_rope_dim % 64 == 0.
  const void* k_rope;
  int64_t kr_stride_tok, kr_stride_head;
  int k_rope_dim;
  // Rows the q/out and k/v (k_rope) tensors hold: >= the plan's totals when an engine passes
  // capacity-sized buffers. Copy engines (TMA) never read past them; no row past a sequence
  // ever reaches a result.
  int64_t q_rows, kv_rows;
  const void* schedule;  // device copy of plan::ScheduleHeader + arrays (contract/schedule_layout.h)
  // Device scratch for the kernel's own use, KernelChoice::scratch_bytes long (sm90: the tensor
  // maps each persistent block rewrites with the plan's extents). Null when it needs none.
  void* scratch;
  int64_t qo_indptr_offset, kv_indptr_offset, tiles_offset;  // byte offsets inside `schedule`
  // FP8 kernels: float32 descale factors [>= batch, num_kv_heads] (mlakit/prefill.h, Descales) at
  // their element strides (batch, kv head); null = 1. Entry [seq, kv head] is read per work item
  // while the kernel runs, so a captured launch reads the values of its replay.
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  int64_t qd_stride_b, qd_stride_h, kd_stride_b, kd_stride_h, vd_stride_b, vd_stride_h;
};

// One compiled prefill kernel: what it computes, its tile, and how to launch it. The build's
// kernels form one table (src/cuda/kernel_table.cu, from the list in src/cuda/kernel_list.h);
// src/plan/kernel_select.h picks from it.
struct KernelEntry {
  const char* name;     // "sm90_bf16_192x128"
  int arch;             // 80: mma.sync kernel, runs on sm80 and newer; 90: wgmma/TMA, sm_90a only
  DType dtype;          // of q, k, v
  int head_dim_qk, head_dim_vo;
  int block_m, block_n;               // q rows per tile, kv rows per step
  int schedule_kind;                  // plan::ScheduleKind of the work array it reads
  size_t scratch_bytes_fixed;         // device scratch (PrefillArgs::scratch): this much once,
  size_t scratch_bytes_per_block;     // then this much per persistent block; zeroed at creation
  // Bytes of one partial-result slot for split key ranges (plan/kv_split.h), counters included;
  // 0: the kernel does not split. The slots follow the per-block scratch (split_region_offset).
  size_t split_slot_bytes;
  void (*launch)(const PrefillArgs& args, int grid_blocks, Stream stream);
  int (*blocks_per_sm)();             // resident blocks per SM on the current device
  // e4m3 kernels: the output's dtype (bf16 or fp16). 16-bit kernels write their input dtype and
  // do not read this field.
  DType out_dtype = DType::kBF16;
};

// The build's kernels (none without CUDA).
const KernelEntry* const* kernel_table(int* count);

// Tile shape and persistent grid size the kernel for this problem uses on this device.
struct KernelChoice {
  int block_m;
  int block_n;
  int grid_blocks;
  int arch;  // 0: CPU backend; 80 or 90: which CUDA kernel
  const KernelEntry* entry = nullptr;  // null for the CPU backend
  size_t scratch_bytes = 0;            // fixed + grid_blocks * per-block scratch of the entry
                                       // (+ the split slots, size_kv_split in plan/kernel_select.h)
  int schedule_kind = 0;               // plan::ScheduleKind (tiles for the CPU backend)
  int split_max_items = 0;             // plan::KvSplitSettings (plan/kernel_select.h
  int split_tail_grid = 0;             // kv_split_settings): 0 = that rule off
  int64_t split_slots = 0;
};

// Where the split slots start inside the kernel's scratch: after the per-block part, 256-aligned.
MLAKIT_HD size_t split_region_offset(size_t fixed, size_t per_block, int grid_blocks) {
  return (fixed + per_block * static_cast<size_t>(grid_blocks) + 255) / 256 * 256;
}

// True if a CUDA kernel exists for these head dims and input / output dtypes (out_dtype is read
// for e4m3 inputs only).
bool prefill_supported(int head_dim_qk, int head_dim_vo, DType dtype, DType out_dtype);
// Chooses by preference (see KernelPreference in mlakit/prefill.h) among the build's kernels that
// run on `device`; throws kUnsupported, naming config.kernel or config.head_dim_qk, when none does.
KernelChoice choose_prefill_kernel(int head_dim_qk, int head_dim_vo, DType dtype, DType out_dtype,
                                   int num_qo_heads, Device device,
                                   KernelPreference preference = KernelPreference::kAuto);
// Launches on `stream`. Throws mlakit::Error(kRuntime) on launch failure.
void launch_prefill(const KernelChoice& choice, int head_dim_qk, int head_dim_vo, DType dtype, DType out_dtype,
                    const PrefillArgs& args, Stream stream);

// Merge of two partial states, elementwise over [N, H, D]; strides in elements.
struct MergeArgs {
  const void* out_a; const float* lse_a;
  const void* out_b; const float* lse_b;
  void* out; float* lse_out;  // lse_out may be null
  int64_t n, h, d;
  int64_t oa_stride_tok, oa_stride_head, ob_stride_tok, ob_stride_head;
  int64_t o_stride_tok, o_stride_head;
  int64_t la_stride_tok, la_stride_head, lb_stride_tok, lb_stride_head;
  int64_t lo_stride_tok, lo_stride_head;
};
void launch_merge(DType dtype, const MergeArgs& args, Stream stream);

}  // namespace cuda
}  // namespace mlakit
