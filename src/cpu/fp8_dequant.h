// FP8 (e4m3) attention on the CPU backend. With a bf16 output on a bf16 path the inputs are decoded
// into bf16 (exact) and the bf16 kernel runs on them with the descales applied per item;
// otherwise they are decoded into float32 with their descale factors folded in, the float32
// kernel of prefill_cpu.cc runs on them and its float32 output is rounded once into the output
// dtype (fp16).
#pragma once

#include <cstdint>

#include "contract/schedule_layout.h"
#include "mlakit/prefill.h"
#include "mlakit/tensor.h"

namespace mlakit {
namespace cpu {

// run_prefill (cpu_backend.h) for e4m3 q, k, v (and k_rope): q * q_descale * k_descale,
// k (k_rope) decoded, v * v_descale, per (sequence, kv head); absent factors are 1. Only the rows
// of the plan's sequences are read and written. Callers validate first.
void run_prefill_e4m3(const plan::ScheduleHeader& header, const int32_t* qo_indptr, const int32_t* kv_indptr,
                      const plan::WorkTile* tiles, const TensorView& q, const TensorView& k,
                      const TensorView* k_rope, const TensorView& v, const TensorView& out, const TensorView* lse,
                      const Descales& descales);

}  // namespace cpu
}  // namespace mlakit
