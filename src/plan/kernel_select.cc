#include "plan/kernel_select.h"

#include "plan/kv_split.h"

namespace mlakit {

const char* kv_split_mode_name(KvSplitMode m) {
  switch (m) {
    case KvSplitMode::kAuto: return "auto";
    case KvSplitMode::kOn: return "on";
    case KvSplitMode::kOff: return "off";
  }
  return "?";
}

const char* kernel_preference_name(KernelPreference p) {
  switch (p) {
    case KernelPreference::kAuto: return "auto";
    case KernelPreference::kSm80: return "sm80";
    case KernelPreference::kSm90: return "sm90";
  }
  return "?";
}

namespace plan {

namespace {

std::string dims_str(const KernelRequest& r) {
  std::string s = "(head_dim_qk, head_dim_vo) = (" + std::to_string(r.head_dim_qk) + ", " +
                  std::to_string(r.head_dim_vo) + ") in " + dtype_name(r.dtype);
  if (r.dtype == DType::kE4M3) s += std::string(" -> ") + dtype_name(r.out_dtype);
  return s;
}

int wanted_arch(KernelPreference p) {
  return p == KernelPreference::kSm80 ? 80 : p == KernelPreference::kSm90 ? 90 : 0;
}

}  // namespace

bool kernel_computes(const cuda::KernelEntry& e, DType dtype, DType out_dtype, int dqk, int dvo) {
  return e.dtype == dtype && (dtype != DType::kE4M3 || e.out_dtype == out_dtype) && e.head_dim_qk == dqk &&
         e.head_dim_vo == dvo;
}

bool kernel_runs_on(const cuda::KernelEntry& e, int device_arch) {
  return e.arch == 90 ? device_arch == 90 : device_arch >= e.arch;
}

KernelSelection select_kernel(const cuda::KernelEntry* const* table, int count, const KernelRequest& r) {
  KernelSelection s;
  const int want = wanted_arch(r.preference);
  bool any_shape = false;     // some kernel computes this (dtype, dims) at all
  bool wanted_shape = false;  // the forced architecture has one
  for (int i = 0; i < count; ++i) {
    const cuda::KernelEntry& e = *table[i];
    if (!kernel_computes(e, r.dtype, r.out_dtype, r.head_dim_qk, r.head_dim_vo)) continue;
    any_shape = true;
    if (want != 0 && e.arch != want) continue;
    wanted_shape = true;
    if (!kernel_runs_on(e, r.device_arch)) continue;
    if (s.entry == nullptr || e.arch > s.entry->arch) s.entry = table[i];
  }
  if (s.entry != nullptr) return s;
  const std::string dev = "compute capability " + std::to_string(r.device_arch / 10) + "." +
                          std::to_string(r.device_arch % 10);
  if (!any_shape) {
    s.argument = "config.head_dim_qk";
    s.why = "no CUDA kernel for " + dims_str(r);
  } else if (!wanted_shape) {
    s.argument = "config.kernel";
    s.why = std::string("the ") + kernel_preference_name(r.preference) + " kernel does not cover " +
            dims_str(r) + " in this build";
  } else {
    s.argument = "config.kernel";
    s.why = want == 90 ? "the sm90 kernel needs compute capability 9.0 (sm_90a code); the device is " + dev
                       : "no CUDA kernel for " + dims_str(r) + " runs on " + dev + " (needs 8.0 or newer)";
  }
  return s;
}

void size_kv_split(cuda::KernelChoice& c, KvSplitMode mode, int max_batch, int64_t max_q_tokens,
                   int heads) {
  c.split_max_items = 0;
  c.split_tail_grid = 0;
  c.split_slots = 0;
  if (c.entry == nullptr || c.entry->split_slot_bytes == 0 || mode == KvSplitMode::kOff) return;
  // kAuto: the tail rule only; kOn: the small-sequence rule too (kv_split.h).
  const int max_items = mode == KvSplitMode::kOn ? c.grid_blocks : 0;
  const int tail_grid = heads <= kTailMaxHeads ? c.grid_blocks : 0;
  const int64_t slots = kv_split_slot_bound(max_batch, max_q_tokens, heads, c.block_m, max_items, tail_grid);
  if (slots <= 0) return;
  const size_t bytes = static_cast<size_t>(slots) * c.entry->split_slot_bytes;
  c.split_max_items = max_items;
  c.split_tail_grid = tail_grid;
  c.split_slots = slots;
  c.scratch_bytes =
      cuda::split_region_offset(c.entry->scratch_bytes_fixed, c.entry->scratch_bytes_per_block, c.grid_blocks) +
      bytes;
}

KvSplitSettings kv_split_settings(const cuda::KernelChoice& c) {
  KvSplitSettings s;
  s.max_items = c.split_max_items;
  s.slot_capacity = c.split_slots;
  s.tail_grid = c.split_tail_grid;
  return s;
}

}  // namespace plan
}  // namespace mlakit
