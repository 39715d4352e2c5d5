// The multi-threaded CPU backend behind RaggedPrefill and merge_states for host tensors.
// Callers validate first; these functions assume valid arguments.
#pragma once

#include <cstdint>

#include "mlakit/prefill.h"
#include "mlakit/tensor.h"
#include "contract/schedule_layout.h"
#include "cpu/cpu_isa.h"

namespace mlakit {
namespace cpu {

// Head dims the CPU backend runs: any from 1 to this, for q/k and v alike.
constexpr int kMaxHeadDim = 512;

// The products `dtype` inputs (writing `out_dtype`) run on when the backend's path is `isa`: bf16
// inputs, and e4m3 inputs with a bf16 output (decoded exactly into bf16), on the path's bf16
// products; fp16 and fp32 inputs, and e4m3 with an fp16 output, on fp32 products (rounded to
// bf16, fp16 inputs missed fp16's tolerance against the reference: relative error 2.7-3.1e-3 and
// lse 1e-4, where fp32 products give 2e-4).
CpuIsa products_isa(DType dtype, DType out_dtype, CpuIsa isa);

// Runs every (tile, q head) of the schedule on host threads, fp32 accumulation, same semantics
// as the CUDA kernels (out in the input dtype, lse fp32 natural log, empty rows -> 0 / -inf),
// on the path cpu_isa_in_use() names.
// k_rope non-null: split K, the last k_rope->shape[2] key columns come from k_rope
// ([T_kv, 1 or Hkv, R]; one head is shared by all), the others from k.
// descales (optional): bf16 inputs that are e4m3 values decoded exactly (fp8_dequant.h), whose
// scores take q_descale * k_descale and output v_descale per (sequence, kv head).
void run_prefill(const plan::ScheduleHeader& header, const int32_t* qo_indptr,
                 const int32_t* kv_indptr, const plan::WorkTile* tiles, const TensorView& q,
                 const TensorView& k, const TensorView* k_rope, const TensorView& v,
                 const TensorView& out, const TensorView* lse, const Descales* descales = nullptr);

void merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                  const TensorView& lse_b, const TensorView& out, const TensorView* lse_out);

}  // namespace cpu
}  // namespace mlakit
