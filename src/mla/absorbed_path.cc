#include "mla/absorbed_path.h"

#include <algorithm>
#include <string>

#include "mla/blas.h"
#include "mlakit/error.h"

namespace mlakit {
namespace mla {
namespace {

// MlaConfig::absorb_max_query_len = -1: the largest new-token count at which the absorbed form
// measured faster than the up-projection (bench/mla_absorb_crossover.py; docs/mla.md). CUDA: an
// H100 at 16 and 128 heads, contexts 1024 and 4096: x5-31 at 1 new token, x1.17-1.53 at 64,
// x0.61-0.80 at 128 (bench/results/mla-absorb-h100). CPU: 16 heads on a Zen 4 (2 threads),
// contexts 1024 and 4096: x13-35 at 1 new token, x1.21-1.28 at 128, x0.85-1.04 at 192-256
// (bench/results/mla-absorb-cpu).
constexpr int kAbsorbCrossoverCuda = 64;
constexpr int kAbsorbCrossoverCpu = 128;

// The latent attention of the step's absorbed requests (its cache, heads and capacities). A
// sparse step's parts are up to two a request (sparse_split.h).
LatentConfig latent_config(const MlaConfig& c) {
  LatentConfig l;
  l.num_heads = c.num_heads;
  l.kv_lora_rank = c.kv_lora_rank;
  l.qk_rope_head_dim = c.qk_rope_head_dim;
  l.dtype = c.dtype;
  l.kv_cache_dtype = c.kv_cache_dtype;
  l.block_size = c.block_size;
  l.num_blocks = c.num_blocks;
  l.max_batch = c.max_topk > 0 ? 2 * c.max_batch : c.max_batch;
  l.max_q_tokens = c.max_absorbed_tokens > 0 ? c.max_absorbed_tokens
                   : c.max_topk > 0          ? c.max_tokens
                                             : std::min<int64_t>(c.max_tokens, 512);
  l.max_kv_tokens = c.max_context_tokens + c.max_tokens;
  l.max_topk = c.max_topk;
  l.max_decoded_rows = c.max_decoded_rows;
  l.device = c.device;
  l.upload_in_run = c.upload_in_run;
  return l;
}

// One product per head, C_h = A_h B_h^T (B_h stored [k, n] with b_kn): A_h at `a` + h
// `stride_a`, B_h a head's block of kv_b_proj rows (`b` + h (Dn + Dv) rows), C_h at `c` + h `stride_c`.
void per_head_gemm(const MlaConfig& c, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda, int64_t stride_a,
                   const void* b, int64_t ldb, bool b_kn, void* out, int64_t ldc, int64_t stride_c, Stream s) {
  blas::GemmArgs g{};
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.c = out;
  g.ldc = ldc;
  g.dtype = c.dtype;
  g.b_kn = b_kn;
  g.batch = c.num_heads;
  g.stride_a = stride_a;
  g.stride_b = (c.qk_nope_head_dim + c.v_head_dim) * ldb;
  g.stride_c = stride_c;
  blas::gemm_nt(g, c.device, s);
}

}  // namespace

AbsorbSetup resolve_absorb(const MlaConfig& c) {
  AbsorbSetup s;
  const bool automatic = c.absorb_max_query_len < 0;
  const int want = automatic ? (c.device.is_cuda() ? kAbsorbCrossoverCuda : kAbsorbCrossoverCpu)
                             : c.absorb_max_query_len;
  const bool sparse = c.max_topk > 0;
  if (want == 0 && !sparse) return s;
  // The field a refusal names: the one that asked for the latent attention.
  const char* field = sparse ? "config.max_topk" : "config.absorb_max_query_len";
  if (c.fp8_attention) {
    if (automatic && !sparse) return s;
    throw Error(ErrorKind::kUnsupported, field,
                "absorbed and sparse requests attend in bf16 / fp16: not with config.fp8_attention");
  }
  s.latent = latent_config(c);
  try {
    LatentAttention::workspace_sizes(s.latent);  // checks the config, allocates nothing
  } catch (const Error& e) {
    if (automatic && !sparse &&
        (e.kind() == ErrorKind::kUnsupported || e.kind() == ErrorKind::kInvalidArgument ||
         e.kind() == ErrorKind::kTypeMismatch)) {
      return s;
    }
    std::string why = e.what();
    if (why.rfind("mlakit: ", 0) == 0) why = why.substr(8);
    throw Error(e.kind(), field,
                std::string(sparse ? "sparse" : "absorbed") +
                    " requests need the latent attention (mlakit/latent.h), which refuses this config: " + why);
  }
  s.enabled = true;
  s.rule = absorb_rule(want, automatic && c.device.is_cuda(), c.num_heads);
  return s;
}

AbsorbedPath::AbsorbedPath(const MlaConfig& config, const LatentConfig& latent, const MlaOps& ops,
                           const MlaLayout& layout)
    : config_(config),
      ops_(ops),
      layout_(layout),
      latent_(std::make_unique<LatentAttention>(latent)),
      q_(static_cast<size_t>(latent.max_batch)),
      kv_(static_cast<size_t>(latent.max_batch)) {}

void AbsorbedPath::plan(const MlaBatch& b, const uint8_t* absorbed, float sm_scale, int topk, Stream stream) {
  const int bs = config_.block_size;
  int n = 0, cols = 1;
  for (int r = 0; r < b.batch_size; ++r) {
    if (!absorbed[r]) continue;
    q_[static_cast<size_t>(n)] = b.query_lens[r];
    kv_[static_cast<size_t>(n)] = b.context_lens[r] + b.query_lens[r];
    cols = std::max(cols, (kv_[static_cast<size_t>(n)] + bs - 1) / bs);
    ++n;
  }
  if (table_.size() < static_cast<size_t>(n) * static_cast<size_t>(cols)) {
    table_.resize(static_cast<size_t>(n) * static_cast<size_t>(cols));
  }
  for (int r = 0, j = 0; r < b.batch_size; ++r) {
    if (!absorbed[r]) continue;
    const int32_t* row = b.block_table + static_cast<int64_t>(r) * b.block_table_cols;
    const int used = (kv_[static_cast<size_t>(j)] + bs - 1) / bs;
    std::copy(row, row + used, table_.begin() + static_cast<int64_t>(j) * cols);
    ++j;
  }
  LatentBatch lb;
  lb.batch_size = n;
  lb.query_lens = q_.data();
  lb.kv_lens = kv_.data();
  lb.block_table = table_.data();
  lb.block_table_cols = cols;
  LatentPlanOptions lo;
  lo.sm_scale = sm_scale;
  lo.causal = true;
  lo.topk = topk;
  lo.indices = LatentIndices::kPositions;
  latent_->plan(lb, lo, stream);
  topk_ = topk;
}

void AbsorbedPath::run(const MlaLayer& y, const TensorView& out, const TensorView* lse, int64_t rows,
                       const uint8_t* plan_block, uint8_t* buffers, Stream s) const {
  const MlaConfig& c = config_;
  const MlaLayout& l = layout_;
  const DType t = c.dtype;
  const int64_t H = c.num_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim;
  const int64_t Dn = c.qk_nope_head_dim, Dv = c.v_head_dim, Dqk = Dn + R;
  const auto* list = reinterpret_cast<const int32_t*>(plan_block + l.absorbed_offset);
  const auto* count = reinterpret_cast<const int32_t*>(plan_block + kAbsorbedCountOffset);
  uint8_t* q_rows = buffers + l.abs_q_offset;
  uint8_t* q_lat = buffers + l.abs_q_latent_offset;
  uint8_t* o_lat = buffers + l.abs_o_latent_offset;
  uint8_t* o_rows = buffers + l.abs_out_offset;
  float* lse_rows = reinterpret_cast<float*>(buffers + l.abs_lse_offset);
  const int64_t wstride = y.kv_b_proj.strides[0];
  const size_t es = dtype_size(t);

  // Rows of the absorbed tokens, by the list: q's into the compact buffer.
  RowCopyArgs in{};
  in.src = y.q.data;
  in.src_row = y.q.strides[0];
  in.src_head = y.q.strides[1];
  in.dst = q_rows;
  in.dst_row = H * Dqk;
  in.dst_head = Dqk;
  in.src_map = list;
  in.count = count;
  in.rows = rows;
  in.heads = static_cast<int>(H);
  in.width = static_cast<int>(Dqk);
  in.elem_bytes = static_cast<int>(es);
  ops_.copy_rows(in, s);

  // Sparse steps: the tokens' rows of the indices (and top-k lengths) alike.
  TensorView idx_view, len_view;
  if (topk_ > 0) {
    RowCopyArgs ix = in;
    ix.src = y.indices->data;
    ix.src_row = y.indices->strides[0];
    ix.src_head = 0;
    ix.dst = buffers + l.abs_indices_offset;
    ix.dst_row = topk_;
    ix.dst_head = 0;
    ix.heads = 1;
    ix.width = topk_;
    ix.elem_bytes = 4;
    ops_.copy_rows(ix, s);
    idx_view = TensorView(ix.dst, DType::kInt32, {rows, topk_}, c.device);
    if (y.topk_length) {
      RowCopyArgs tl = ix;
      tl.src = y.topk_length->data;
      tl.src_row = y.topk_length->ndim > 0 ? y.topk_length->strides[0] : 1;
      tl.dst = buffers + l.abs_topk_length_offset;
      tl.dst_row = 1;
      tl.width = 1;
      ops_.copy_rows(tl, s);
      len_view = TensorView(tl.dst, DType::kInt32, {rows}, c.device);
    }
  }

  // q_lat[:, h] = q_nope[:, h] W_UK[h]: W_UK[h] is kv_b_proj's rows [h (Dn + Dv), + Dn), [Dn, L].
  per_head_gemm(c, rows, L, Dn, q_rows, H * Dqk, Dqk, y.kv_b_proj.data, wstride, /*b_kn=*/true, q_lat, H * L, L, s);

  const TensorView q_view = view3(q_lat, t, rows, H, L, H * L, L, c.device);
  const TensorView q_pe = view3(q_rows + Dn * es, t, rows, H, R, H * Dqk, Dqk, c.device);
  const TensorView o_view = view3(o_lat, t, rows, H, L, H * L, L, c.device);
  const TensorView lse_view(lse_rows, DType::kFP32, {rows, H}, c.device);
  LatentLayer ll;
  ll.q = q_view;
  ll.q_pe = &q_pe;
  ll.kv_cache = y.kv_cache;
  if (c.kv_cache_dtype == KvCacheDtype::kFp8) ll.k_scale = &y.k_scale;
  if (topk_ > 0) {
    ll.indices = &idx_view;
    if (y.topk_length) ll.topk_length = &len_view;
  }
  latent_->run(ll, o_view, lse ? &lse_view : nullptr, s);

  // out_rows[:, h] = o_lat[:, h] W_UV[h]^T: W_UV[h] is kv_b_proj's rows [h (Dn + Dv) + Dn, + Dv), [Dv, L].
  per_head_gemm(c, rows, Dv, L, o_lat, H * L, L,
                static_cast<const uint8_t*>(y.kv_b_proj.data) + Dn * wstride * static_cast<int64_t>(es), wstride,
                /*b_kn=*/false, o_rows, H * Dv, Dv, s);

  // Back into out (and lse) at the tokens' rows.
  RowCopyArgs back{};
  back.src = o_rows;
  back.src_row = H * Dv;
  back.src_head = Dv;
  back.dst = out.data;
  back.dst_row = out.strides[0];
  back.dst_head = out.strides[1];
  back.dst_map = list;
  back.count = count;
  back.rows = rows;
  back.heads = static_cast<int>(H);
  back.width = static_cast<int>(Dv);
  back.elem_bytes = static_cast<int>(es);
  ops_.copy_rows(back, s);
  if (lse) {
    RowCopyArgs lc = back;
    lc.src = lse_rows;
    lc.src_row = H;
    lc.src_head = 1;
    lc.dst = lse->data;
    lc.dst_row = lse->strides[0];
    lc.dst_head = lse->strides[1];
    lc.width = 1;
    lc.elem_bytes = 4;
    ops_.copy_rows(lc, s);
  }
}

}  // namespace mla
}  // namespace mlakit
