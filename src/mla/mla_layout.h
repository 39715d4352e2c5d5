// Where everything of an MLA step lives in its device workspace. Two parts:
//   * the plan block, staged on the host and published by plan(): a header, the row count of
//     each gather launch, the new tokens' cache slots, the gather maps (gather_entry.h) and the
//     attention schedules (launch 0: the fused or new-token launch, whose gather also writes the
//     new tokens into the cache; launches 1..: context chunks);
//   * buffers that run() fills: gathered latents, up-projected K/V and, when the config allows
//     context chunks, the chunk output and the LSEs they are merged with; with fp8_attention
//     also q, K/V and k_pe in e4m3 and the descale factors; with absorbed requests their q rows,
//     absorbed q, latent output, projected output and LSE, compacted in absorbed-token order.
// Offsets are fixed by the config, so a graph captured under one plan reads the next plan's data.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mlakit/mla.h"
#include "mlakit/tensor.h"
#include "contract/schedule_layout.h"

namespace mlakit {
namespace mla {

struct MlaHeader {
  int32_t total_q;     // new tokens this step (the entries of slots)
  int32_t chunked;     // 0: one fused launch; 1: new tokens, then context chunks
  int32_t num_chunks;
  int32_t absorbed_tokens;  // entries of the absorbed token list
  int32_t reserved[12];
};
static_assert(sizeof(MlaHeader) == 64, "header is 64 bytes");

struct MlaLayout {
  int64_t rows = 0;        // workspace_rows (resolved)
  int64_t max_chunks = 0;  // context chunks the worst step needs
  int64_t max_absorbed = 0;  // absorbed tokens a step may have (0: absorption off)
  int latent_width = 0;    // kv_lora_rank + qk_rope_head_dim
  int kv_width = 0;        // num_heads * (qk_nope_head_dim + v_head_dim)
  plan::ScheduleLayout schedule{};  // one attention schedule block

  // Plan block (bytes from its start).
  size_t counts_offset = 0;  // int32[1 + max_chunks]
  size_t slots_offset = 0;   // int32[max_tokens]: cache slot of each new token
  size_t gather_offset = 0;  // int32[max_tokens + max_context_tokens]: every launch's map
  size_t absorbed_offset = 0;  // int32[max_absorbed]: the absorbed new tokens (rows of q / out)
  size_t blocks_offset = 0;  // (1 + max_chunks) schedule blocks of schedule.total_bytes
  size_t plan_bytes = 0;

  // Buffers (bytes from their own allocation's start).
  size_t latent_offset = 0;     // [rows, latent_width]
  size_t kv_offset = 0;         // [rows, num_heads, Dn + Dv]
  size_t chunk_out_offset = 0;  // [max_tokens, num_heads, Dv]          (chunking only)
  size_t lse_offset = 0;        // fp32 [max_tokens, num_heads] running (chunking only)
  size_t chunk_lse_offset = 0;  // fp32 [max_tokens, num_heads]         (chunking only)
  size_t q8_offset = 0;         // e4m3 [max_tokens, num_heads, Dn + R]  (fp8_attention only)
  size_t kv8_offset = 0;        // e4m3 [rows, num_heads, Dn + Dv]       (fp8_attention only)
  size_t rope8_offset = 0;      // e4m3 [rows, R]                        (fp8_attention only)
  size_t descale_offset = 0;    // fp32 [3, max_batch, num_heads]: q, k, v (fp8_attention only)
  // Absorbed requests (max_absorbed > 0), [max_absorbed, num_heads, width]:
  size_t abs_q_offset = 0;       // q rows, Dn + R (16-bit)
  size_t abs_q_latent_offset = 0;  // q_nope W_UK, L
  size_t abs_o_latent_offset = 0;  // latent attention's output, L
  size_t abs_out_offset = 0;     // its W_UV projection, Dv
  size_t abs_lse_offset = 0;     // fp32 [max_absorbed, num_heads]
  size_t abs_indices_offset = 0;      // int32 [max_absorbed, max_topk] (sparse steps: max_topk > 0)
  size_t abs_topk_length_offset = 0;  // int32 [max_absorbed]            (sparse steps)
  size_t buffer_bytes = 0;

  size_t block_offset(int launch) const {
    return blocks_offset + static_cast<size_t>(launch) * schedule.total_bytes;
  }
};

// The config must have been checked (check_config). max_absorbed: the absorbed-token capacity,
// 0 when the step never absorbs.
MlaLayout make_layout(const MlaConfig& config, int block_m, int64_t max_absorbed = 0);

// A 3-D view [rows, heads, width] of workspace memory at `p`, token stride `tok`, head stride `head`.
inline TensorView view3(void* p, DType t, int64_t rows, int64_t heads, int64_t width, int64_t tok, int64_t head,
                        Device d) {
  return TensorView(p, t, {rows, heads, width}, {tok, head, 1}, d);
}

// Where the header's absorbed-token count lives in the plan block (the copies read it on the device).
constexpr size_t kAbsorbedCountOffset = offsetof(MlaHeader, absorbed_tokens);

}  // namespace mla
}  // namespace mlakit
