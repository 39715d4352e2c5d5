// The multi-threaded CPU backend behind RaggedPrefill and merge_states for host tensors.
// Callers validate first; these functions assume valid arguments.
#pragma once

#include <cstdint>

#include "mlakit/tensor.h"
#include "contract/schedule_layout.h"

namespace mlakit {
namespace cpu {

// Runs every (tile, q head) of the schedule on host threads, fp32 accumulation, same semantics
// as the CUDA kernels (out in the input dtype, lse fp32 natural log, empty rows -> 0 / -inf).
// k_rope non-null: split K, the last k_rope->shape[2] key columns come from k_rope
// ([T_kv, 1 or Hkv, R]; one head is shared by all), the others from k.
void run_prefill(const plan::ScheduleHeader& header, const int32_t* qo_indptr,
                 const int32_t* kv_indptr, const plan::WorkTile* tiles, const TensorView& q,
                 const TensorView& k, const TensorView* k_rope, const TensorView& v,
                 const TensorView& out, const TensorView* lse);

void merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                  const TensorView& lse_b, const TensorView& out, const TensorView* lse_out);

}  // namespace cpu
}  // namespace mlakit
