// Which compiled kernel serves a config on a device: plain C++ over the kernel table, so the
// rules are covered by CPU tests with made-up tables.
#pragma once

#include <string>

#include "contract/prefill_launch.h"
#include "plan/kv_split.h"
#include "mlakit/prefill.h"

namespace mlakit {
namespace plan {

struct KernelRequest {
  int device_arch;  // compute capability as major * 10 + minor (90 for H100/H200)
  DType dtype;
  int head_dim_qk;
  int head_dim_vo;
  KernelPreference preference;
  DType out_dtype = DType::kBF16;  // e4m3 inputs: the output's dtype (16-bit inputs write their own)
};

// Whether entry `e` computes (dtype, out_dtype) at these head dims.
bool kernel_computes(const cuda::KernelEntry& e, DType dtype, DType out_dtype, int head_dim_qk, int head_dim_vo);

// True when code of entry `e` runs on a device of compute capability `device_arch`: sm80 code
// runs on 8.0 and newer; sm_90a code (wgmma, setmaxnreg) only on 9.0 itself.
bool kernel_runs_on(const cuda::KernelEntry& e, int device_arch);

struct KernelSelection {
  const cuda::KernelEntry* entry = nullptr;  // null: nothing fits
  const char* argument = "";                 // when null: the config field to blame
  std::string why;                           // when null: a sentence for the error
};

// kAuto prefers the newest architecture that runs on the device and covers (dtype, head dims);
// kSm80 / kSm90 accept only that kernel.
KernelSelection select_kernel(const cuda::KernelEntry* const* table, int count, const KernelRequest& r);

// Resolves `mode` for a chosen kernel and the capacity (mlakit/prefill.h, KvSplitMode): sets
// choice.split_max_items / split_tail_grid / split_slots and adds the slots to
// choice.scratch_bytes. The CPU backend and kernels that do not split keep both rules off. kAuto
// turns on the tail rule only: the small-sequence rule measured slower on every workload tried
// (docs/performance.md).
void size_kv_split(cuda::KernelChoice& choice, KvSplitMode mode, int max_batch, int64_t max_q_tokens,
                   int num_qo_heads);

// The planner's split settings for a sized choice.
KvSplitSettings kv_split_settings(const cuda::KernelChoice& choice);

}  // namespace plan
}  // namespace mlakit
