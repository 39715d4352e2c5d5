#include "mla/mla_layout.h"

namespace mlakit {
namespace mla {

MlaLayout make_layout(const MlaConfig& c, int block_m, int64_t max_absorbed) {
  using plan::align_up;
  MlaLayout l;
  l.rows = c.workspace_rows > 0 ? c.workspace_rows : c.max_tokens + c.max_context_tokens;
  const bool can_chunk = c.max_tokens + c.max_context_tokens > l.rows;
  l.max_chunks = can_chunk ? (c.max_context_tokens + l.rows - 1) / l.rows : 0;
  l.latent_width = c.kv_lora_rank + c.qk_rope_head_dim;
  l.kv_width = c.num_heads * (c.qk_nope_head_dim + c.v_head_dim);
  l.schedule = plan::make_layout(c.max_batch, c.max_tokens, block_m);

  size_t off = sizeof(MlaHeader);
  l.counts_offset = off;
  off = align_up(off + sizeof(int32_t) * static_cast<size_t>(1 + l.max_chunks), 256);
  l.slots_offset = off;
  off = align_up(off + sizeof(int32_t) * static_cast<size_t>(c.max_tokens), 256);
  l.gather_offset = off;
  off = align_up(off + sizeof(int32_t) * static_cast<size_t>(c.max_tokens + c.max_context_tokens), 256);
  l.max_absorbed = max_absorbed;
  l.absorbed_offset = off;
  off = align_up(off + sizeof(int32_t) * static_cast<size_t>(max_absorbed), 256);
  l.blocks_offset = off;
  off += static_cast<size_t>(1 + l.max_chunks) * l.schedule.total_bytes;
  l.plan_bytes = align_up(off, 256);

  const size_t es = dtype_size(c.dtype);
  const size_t heads = static_cast<size_t>(c.num_heads);
  const size_t tokens = static_cast<size_t>(c.max_tokens);
  off = 0;
  l.latent_offset = off;
  off = align_up(off + static_cast<size_t>(l.rows) * l.latent_width * es, 256);
  l.kv_offset = off;
  off = align_up(off + static_cast<size_t>(l.rows) * l.kv_width * es, 256);
  if (can_chunk) {
    l.chunk_out_offset = off;
    off = align_up(off + tokens * heads * c.v_head_dim * es, 256);
    l.lse_offset = off;
    off = align_up(off + tokens * heads * sizeof(float), 256);
    l.chunk_lse_offset = off;
    off = align_up(off + tokens * heads * sizeof(float), 256);
  }
  if (c.fp8_attention) {
    const size_t rows = static_cast<size_t>(l.rows);
    l.q8_offset = off;
    off = align_up(off + tokens * heads * static_cast<size_t>(c.qk_nope_head_dim + c.qk_rope_head_dim), 256);
    l.kv8_offset = off;
    off = align_up(off + rows * l.kv_width, 256);
    l.rope8_offset = off;
    off = align_up(off + rows * static_cast<size_t>(c.qk_rope_head_dim), 256);
    l.descale_offset = off;
    off = align_up(off + 3 * static_cast<size_t>(c.max_batch) * heads * sizeof(float), 256);
  }
  if (max_absorbed > 0) {
    const size_t n = static_cast<size_t>(max_absorbed) * heads;
    l.abs_q_offset = off;
    off = align_up(off + n * static_cast<size_t>(c.qk_nope_head_dim + c.qk_rope_head_dim) * es, 256);
    l.abs_q_latent_offset = off;
    off = align_up(off + n * static_cast<size_t>(c.kv_lora_rank) * es, 256);
    l.abs_o_latent_offset = off;
    off = align_up(off + n * static_cast<size_t>(c.kv_lora_rank) * es, 256);
    l.abs_out_offset = off;
    off = align_up(off + n * static_cast<size_t>(c.v_head_dim) * es, 256);
    l.abs_lse_offset = off;
    off = align_up(off + n * sizeof(float), 256);
    if (c.max_topk > 0) {
      const size_t rows = static_cast<size_t>(max_absorbed);
      l.abs_indices_offset = off;
      off = align_up(off + rows * static_cast<size_t>(c.max_topk) * sizeof(int32_t), 256);
      l.abs_topk_length_offset = off;
      off = align_up(off + rows * sizeof(int32_t), 256);
    }
  }
  l.buffer_bytes = off;
  return l;
}

}  // namespace mla
}  // namespace mlakit
