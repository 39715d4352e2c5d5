// MlaStep: the API glue of the MLA prefill step. Validation lives in mla_checks, the plan block in
// mla_plan_build / mla_layout, device work behind three seams: attention (core/backend.h), the
// gather with its fused cache write (mla_ops.h), the up-projection (blas.h).
#include "mlakit/mla.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/plan_staging.h"
#include "mla/blas.h"
#include "mla/mla_checks.h"
#include "mla/mla_layout.h"
#include "mla/mla_ops.h"
#include "mla/mla_plan_build.h"
#include "plan/kernel_select.h"
#include "mlakit/error.h"
#include "mlakit/latent.h"

namespace mlakit {

namespace {

// MlaConfig::absorb_max_query_len = -1: the largest new-token count at which the absorbed form
// measured faster than the up-projection (bench/mla_absorb_crossover.py; docs/mla.md). CUDA: 0
// (off) until measured on the GPU. CPU: 16 heads on a Zen 4 (2 threads), contexts 1024 and 4096:
// x12 at 1 new token, x1.17-1.29 at 128, x0.85-0.95 at 192-256.
constexpr int kAbsorbCrossoverCuda = 0;
constexpr int kAbsorbCrossoverCpu = 128;

// The latent attention an absorbing step runs (the step's cache, heads and capacities).
LatentConfig latent_config(const MlaConfig& c, int64_t max_absorbed) {
  LatentConfig l;
  l.num_heads = c.num_heads;
  l.kv_lora_rank = c.kv_lora_rank;
  l.qk_rope_head_dim = c.qk_rope_head_dim;
  l.dtype = c.dtype;
  l.kv_cache_dtype = c.kv_cache_dtype;
  l.block_size = c.block_size;
  l.num_blocks = c.num_blocks;
  l.max_batch = c.max_batch;
  l.max_q_tokens = max_absorbed;
  l.max_kv_tokens = c.max_context_tokens + c.max_tokens;
  l.device = c.device;
  l.upload_in_run = c.upload_in_run;
  return l;
}

struct Setup {
  std::unique_ptr<backend::Backend> backend;
  cuda::KernelChoice choice{};
  mla::MlaLayout layout;
  int absorb_max_query_len = 0;  // resolved
  LatentConfig latent;           // when absorb_max_query_len > 0
};

// absorb_max_query_len resolved: -1 becomes the backend's crossover where the latent attention
// takes the config, else 0; an explicit value > 0 must be runnable. Sets s.latent.
void resolve_absorb(const MlaConfig& c, Setup& s) {
  const int64_t cap = c.max_absorbed_tokens > 0 ? c.max_absorbed_tokens : std::min<int64_t>(c.max_tokens, 512);
  const bool automatic = c.absorb_max_query_len < 0;
  const int want = automatic ? (c.device.is_cuda() ? kAbsorbCrossoverCuda : kAbsorbCrossoverCpu)
                             : c.absorb_max_query_len;
  s.absorb_max_query_len = 0;
  if (want == 0) return;
  if (c.fp8_attention) {
    if (automatic) return;
    throw Error(ErrorKind::kUnsupported, "config.absorb_max_query_len",
                "absorbed requests attend in bf16 / fp16: not with config.fp8_attention");
  }
  s.latent = latent_config(c, cap);
  try {
    LatentAttention::workspace_sizes(s.latent);  // checks the config, allocates nothing
  } catch (const Error& e) {
    if (automatic && (e.kind() == ErrorKind::kUnsupported || e.kind() == ErrorKind::kInvalidArgument ||
                      e.kind() == ErrorKind::kTypeMismatch)) {
      return;
    }
    std::string why = e.what();
    if (why.rfind("mlakit: ", 0) == 0) why = why.substr(8);
    throw Error(e.kind(), "config.absorb_max_query_len",
                "absorbed requests need the latent attention (mlakit/latent.h), which refuses this config: " + why);
  }
  s.absorb_max_query_len = want;
}

Setup setup(const MlaConfig& c) {
  mla::check_config(c);
  Setup s;
  s.backend = backend::make_backend(c.device, "config.device");
  // The CUDA step would have to round K and V in the up-projection's epilogue and q in one pass
  // to gain from FP8 (docs/fp8.md): it has no such rounding, so FP8 attention is the CPU's.
  if (c.fp8_attention && c.device.is_cuda())
    throw Error(ErrorKind::kUnsupported, "config.fp8_attention",
                "the MLA step's FP8 attention runs on the CPU backend only (docs/fp8.md)");
  const DType attn = c.fp8_attention ? DType::kE4M3 : c.dtype;
  try {
    s.choice = s.backend->choose_kernel(c.qk_nope_head_dim + c.qk_rope_head_dim, c.v_head_dim, attn, c.dtype,
                                        c.num_heads, c.kernel);
  } catch (const Error& e) {
    // The attention backend names its own config fields; name the MLA ones.
    if (e.kind() != ErrorKind::kUnsupported || e.argument().rfind("config.head_dim", 0) != 0) throw;
    throw Error(e.kind(), c.fp8_attention ? "config.fp8_attention" : "config.qk_nope_head_dim",
                std::string("no ") + (c.fp8_attention ? "e4m3 " : "") + "attention kernel for qk_nope + qk_rope = " +
                    std::to_string(c.qk_nope_head_dim + c.qk_rope_head_dim) + ", v = " +
                    std::to_string(c.v_head_dim) + " on " + to_string(c.device));
  }
  plan::size_kv_split(s.choice, c.kv_split, c.max_batch, c.max_tokens, c.num_heads);
  resolve_absorb(c, s);
  s.layout = mla::make_layout(c, s.choice.block_m, s.absorb_max_query_len > 0 ? s.latent.max_q_tokens : 0);
  return s;
}

// A 3-D view [rows, heads, width] at `p` with token stride `tok` and head stride `head`.
TensorView view3(void* p, DType t, int64_t rows, int64_t heads, int64_t width, int64_t tok,
                 int64_t head, Device d) {
  return TensorView(p, t, {rows, heads, width}, {tok, head, 1}, d);
}

TensorView first_rows(TensorView v, int64_t rows) {
  v.shape[0] = rows;
  return v;
}

}  // namespace

struct MlaStep::Impl {
  MlaConfig config;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<mla::MlaOps> ops;
  cuda::KernelChoice choice{};
  mla::MlaLayout layout;
  std::unique_ptr<backend::PlanStaging> staging;
  std::unique_ptr<mla::PlanBuilder> builder;
  uint8_t* buffers = nullptr;
  // Absorbed requests: the latent attention and its batch of them (host arrays, sized once).
  int absorb_max_query_len = 0;
  std::unique_ptr<LatentAttention> latent;
  std::vector<uint8_t> absorbed;  // [max_batch]: the last plan's choice
  std::vector<int32_t> latent_q, latent_kv, latent_table;

  bool planned = false;
  mla::StepPlan plan;
  MlaPlanInfo info;

  Impl(const MlaConfig& c, Setup s)
      : config(c),
        backend(std::move(s.backend)),
        choice(s.choice),
        layout(s.layout),
        absorb_max_query_len(s.absorb_max_query_len),
        absorbed(static_cast<size_t>(c.max_batch), 0) {
    info.absorb_max_query_len = absorb_max_query_len;
    if (absorb_max_query_len > 0) {
      latent = std::make_unique<LatentAttention>(s.latent);
      latent_q.resize(static_cast<size_t>(c.max_batch));
      latent_kv.resize(static_cast<size_t>(c.max_batch));
    }
    ops = mla::make_ops(c.device);
    // cuBLASLt's handle is created on first use; do it here, never inside a graph capture.
    if (c.device.is_cuda()) cuda::blas::init(c.device.index);
    staging = std::make_unique<backend::PlanStaging>(
        *backend, layout.plan_bytes, choice.scratch_bytes,
        c.upload_in_run ? backend::PlanStaging::Upload::kInRun : backend::PlanStaging::Upload::kInPlan);
    builder = std::make_unique<mla::PlanBuilder>(config, layout, choice);
    buffers = static_cast<uint8_t*>(backend->alloc_device(layout.buffer_bytes));
    plan.launches.reserve(static_cast<size_t>(1 + layout.max_chunks));
    if (c.device.is_cuda()) {
      try {
        tune_up_projection();
      } catch (...) {  // the members clean up after themselves; the raw buffer does not
        backend->drain();
        backend->free_device(buffers);
        throw;
      }
    }
  }

  // The up-projection's GEMM algorithm per class of row counts, timed now on the step's own
  // buffers (src/mla/cuda/blas_cublas.cc): at creation, never inside a capture. The weight is
  // assumed contiguous ([H x 256, kv_lora_rank]); a strided one gets cuBLASLt's first choice.
  void tune_up_projection() {
    cuda::blas::TuneArgs t{};
    t.max_m = layout.rows;
    t.n = layout.kv_width;
    t.k = config.kv_lora_rank;
    t.lda = layout.latent_width;
    t.ldb = config.kv_lora_rank;
    t.ldc = layout.kv_width;
    t.dtype = config.dtype;
    t.a = buffers + layout.latent_offset;
    t.c = buffers + layout.kv_offset;
    cuda::blas::tune(t, config.device.index);
  }
  ~Impl() {
    backend->drain();
    backend->free_device(buffers);
  }

  const uint8_t* ws() const { return staging->device(); }
  const int32_t* ws_i32(size_t offset) const { return reinterpret_cast<const int32_t*>(ws() + offset); }

  // The layer's cache as the gather reads and writes it; an FP8 cache's scale (kFp8) by address,
  // read when the gather runs, so a captured graph replays with the value the buffer holds then.
  mla::CacheView cache_view(const MlaLayer& y) const {
    const TensorView& cache = y.kv_cache;
    const float* k_scale =
        config.kv_cache_dtype == KvCacheDtype::kFp8 ? static_cast<const float*>(y.k_scale.data) : nullptr;
    return mla::CacheView{cache.data, cache.strides[0],   cache.strides[1], config.block_size,
                          layout.latent_width, config.kv_cache_dtype, k_scale};
  }

  // FP8 attention: the e4m3 q of the step and the descale factors, as the attention reads them.
  struct Fp8Views {
    TensorView q, q_descale, k_descale, v_descale;
  };
  Fp8Views fp8_views() const {
    const MlaConfig& c = config;
    const int dqk = c.qk_nope_head_dim + c.qk_rope_head_dim;
    const int64_t bh = static_cast<int64_t>(c.max_batch) * c.num_heads;
    float* desc = reinterpret_cast<float*>(buffers + layout.descale_offset);
    Fp8Views v;
    v.q = view3(buffers + layout.q8_offset, DType::kE4M3, plan.totals.total_q, c.num_heads, dqk, c.num_heads * dqk, dqk,
                c.device);
    v.q_descale = TensorView(desc, DType::kFP32, {c.max_batch, c.num_heads}, c.device);
    v.k_descale = TensorView(desc + bh, DType::kFP32, {c.max_batch, c.num_heads}, c.device);
    v.v_descale = TensorView(desc + 2 * bh, DType::kFP32, {c.max_batch, c.num_heads}, c.device);
    return v;
  }

  // FP8 attention: the launch's K, V and k_pe (and, in the step's first launch, its q) rounded to
  // e4m3 into buffers of the same layouts, and the descales written (mla_ops.h, Fp8Args).
  void round_to_e4m3(bool with_q, int64_t rows, const MlaLayer& y, Stream s) const {
    const MlaConfig& c = config;
    mla::Fp8Args f{};
    f.latent = buffers + layout.latent_offset;
    f.latent_stride = layout.latent_width;
    f.latent_dim = c.kv_lora_rank;
    f.rope_dim = c.qk_rope_head_dim;
    f.rows = rows;
    f.kv = buffers + layout.kv_offset;
    f.heads = c.num_heads;
    f.dn = c.qk_nope_head_dim;
    f.dv = c.v_head_dim;
    f.weight = y.kv_b_proj.data;
    f.weight_stride = y.kv_b_proj.strides[0];
    f.q = with_q ? &y.q : nullptr;
    f.q_rows = plan.totals.total_q;
    f.dtype = c.dtype;
    f.kv8 = buffers + layout.kv8_offset;
    f.rope8 = buffers + layout.rope8_offset;
    f.q8 = buffers + layout.q8_offset;
    f.descales = reinterpret_cast<float*>(buffers + layout.descale_offset);
    f.max_batch = c.max_batch;
    ops->quantize_fp8(f, s);
  }

  // One gather + up-projection + attention launch. The launch whose map holds the new tokens
  // (the first) takes them from kv_c / k_pe and writes them into the cache in its gather.
  void launch(int i, const MlaLayer& y, const TensorView& out, const TensorView* lse, Stream s) const {
    const mla::LaunchPlan& lp = plan.launches[static_cast<size_t>(i)];
    const MlaConfig& c = config;
    const DType t = c.dtype;
    const size_t es = dtype_size(t);
    uint8_t* latent = buffers + layout.latent_offset;
    uint8_t* kv = buffers + layout.kv_offset;

    mla::GatherArgs g{};
    g.cache = cache_view(y);
    g.map = ws_i32(layout.gather_offset) + lp.gather_begin;
    g.count = ws_i32(layout.counts_offset) + i;
    g.rows = lp.rows;
    g.out = latent;
    g.out_stride = layout.latent_width;
    if (lp.new_tokens) {
      g.fresh.kv_c = y.kv_c.data;
      g.fresh.kv_c_stride = y.kv_c.strides[0];
      g.fresh.k_pe = y.k_pe.data;
      g.fresh.k_pe_stride = y.k_pe.strides[0];
      g.fresh.latent_dim = c.kv_lora_rank;
      g.fresh.slots = ws_i32(layout.slots_offset);
    }
    g.dtype = t;
    ops->gather(g, s);
    // An eager step whose new tokens all attend in latent space needs only the cache write.
    if (i == 0 && !plan.graph && !plan.up_requests && !plan.totals.chunked) return;

    blas::GemmArgs m{};
    m.m = lp.gemm_rows;
    m.n = layout.kv_width;
    m.k = c.kv_lora_rank;
    m.a = latent;
    m.lda = layout.latent_width;
    m.b = y.kv_b_proj.data;
    m.ldb = y.kv_b_proj.strides[0];
    m.c = kv;
    m.ldc = layout.kv_width;
    m.dtype = t;
    blas::gemm_nt(m, c.device, s);

    const int64_t hd = c.qk_nope_head_dim + c.v_head_dim;
    const int dqk = c.qk_nope_head_dim + c.qk_rope_head_dim;
    backend::AttentionCall a;
    Fp8Views f8;
    if (c.fp8_attention) {
      round_to_e4m3(i == 0, lp.rows, y, s);
      f8 = fp8_views();
      a.descales = Descales{&f8.q_descale, &f8.k_descale, &f8.v_descale};
    }
    // K nope and V interleaved per head in the up-projection output; the RoPE key is the tail of
    // each latent row, one per token for every head (head stride 0). FP8: the same layouts in e4m3.
    const DType at = c.fp8_attention ? DType::kE4M3 : t;
    const size_t aes = dtype_size(at);
    uint8_t* kv_a = c.fp8_attention ? buffers + layout.kv8_offset : kv;
    uint8_t* rope_a = c.fp8_attention ? buffers + layout.rope8_offset : latent + c.kv_lora_rank * es;
    const int64_t rope_stride = c.fp8_attention ? c.qk_rope_head_dim : layout.latent_width;
    const TensorView k = view3(kv_a, at, layout.rows, c.num_heads, c.qk_nope_head_dim, layout.kv_width, hd, c.device);
    const TensorView v = view3(kv_a + c.qk_nope_head_dim * aes, at, layout.rows, c.num_heads, c.v_head_dim,
                               layout.kv_width, hd, c.device);
    const TensorView k_rope = view3(rope_a, at, layout.rows, 1, c.qk_rope_head_dim, rope_stride, 0, c.device);
    a.q = c.fp8_attention ? &f8.q : &y.q;
    a.k = &k;
    a.k_rope = &k_rope;
    a.v = &v;
    a.out = &out;
    a.lse = lse;
    a.head_dim_qk = dqk;
    a.head_dim_vo = c.v_head_dim;
    a.num_qo_heads = a.num_kv_heads = c.num_heads;
    a.dtype = at;
    a.out_dtype = t;
    a.schedule = {ws() + layout.block_offset(i), layout.schedule};
    a.scratch = staging->scratch();  // launches run in stream order, so they share it
    backend->attention(choice, a, s);
  }

  // The absorbed requests' latent attention plan: their new tokens over their whole cached
  // context (kv_len = context + new, causal among the new), pages from their block-table rows.
  // Planned every step, empty when none is absorbed, so a captured run replays whatever comes.
  void plan_latent(const MlaBatch& b, const MlaPlanOptions& o, Stream stream) {
    const MlaConfig& c = config;
    int n = 0, cols = 1;
    for (int r = 0; r < b.batch_size; ++r) {
      if (!absorbed[static_cast<size_t>(r)]) continue;
      latent_q[static_cast<size_t>(n)] = b.query_lens[r];
      latent_kv[static_cast<size_t>(n)] = b.context_lens[r] + b.query_lens[r];
      cols = std::max(cols, (latent_kv[static_cast<size_t>(n)] + c.block_size - 1) / c.block_size);
      ++n;
    }
    if (latent_table.size() < static_cast<size_t>(n) * static_cast<size_t>(cols)) {
      latent_table.resize(static_cast<size_t>(n) * static_cast<size_t>(cols));
    }
    for (int r = 0, j = 0; r < b.batch_size; ++r) {
      if (!absorbed[static_cast<size_t>(r)]) continue;
      const int32_t* row = b.block_table + static_cast<int64_t>(r) * b.block_table_cols;
      const int used = (latent_kv[static_cast<size_t>(j)] + c.block_size - 1) / c.block_size;
      std::copy(row, row + used, latent_table.begin() + static_cast<int64_t>(j) * cols);
      ++j;
    }
    LatentBatch lb;
    lb.batch_size = n;
    lb.query_lens = latent_q.data();
    lb.kv_lens = latent_kv.data();
    lb.block_table = latent_table.data();
    lb.block_table_cols = cols;
    LatentPlanOptions lo;
    lo.sm_scale = o.sm_scale > 0.0f ? o.sm_scale
                                    : static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.qk_nope_head_dim +
                                                                                             c.qk_rope_head_dim)));
    lo.causal = true;
    latent->plan(lb, lo, stream);
  }

  // Sized by the plan: the absorbed tokens (eager), or what a captured step covers for any plan.
  void absorbed_part(const MlaLayer& y, const TensorView& out, const TensorView* lse, Stream s) const {
    if (latent && plan.totals.absorbed_rows > 0) run_absorbed(y, out, lse, s);
  }

  // The absorbed requests (mlakit/mla.h): after the launches above wrote their new tokens into
  // the cache, in stream order: their q rows compacted, q_nope W_UK per head, the latent
  // attention, its W_UV projection per head, and the rows copied back into out (and lse).
  void run_absorbed(const MlaLayer& y, const TensorView& out, const TensorView* lse, Stream s) const {
    const MlaConfig& c = config;
    const DType t = c.dtype;
    const int64_t H = c.num_heads, L = c.kv_lora_rank, R = c.qk_rope_head_dim;
    const int64_t Dn = c.qk_nope_head_dim, Dv = c.v_head_dim, Dqk = Dn + R;
    const int64_t rows = plan.totals.absorbed_rows;
    const int32_t* list = ws_i32(layout.absorbed_offset);
    const int32_t* count = ws_i32(mla::kAbsorbedCountOffset);
    uint8_t* q_rows = buffers + layout.abs_q_offset;
    uint8_t* q_lat = buffers + layout.abs_q_latent_offset;
    uint8_t* o_lat = buffers + layout.abs_o_latent_offset;
    uint8_t* o_rows = buffers + layout.abs_out_offset;
    float* lse_rows = reinterpret_cast<float*>(buffers + layout.abs_lse_offset);
    const int64_t wstride = y.kv_b_proj.strides[0];
    const size_t es = dtype_size(t);

    mla::RowCopyArgs in{};
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
    ops->copy_rows(in, s);

    // q_lat[:, h] = q_nope[:, h] W_UK[h]: W_UK[h] is kv_b_proj's rows [h (Dn + Dv), + Dn), [Dn, L].
    blas::GemmArgs ab{};
    ab.m = rows;
    ab.n = L;
    ab.k = Dn;
    ab.a = q_rows;
    ab.lda = H * Dqk;
    ab.b = y.kv_b_proj.data;
    ab.ldb = wstride;
    ab.c = q_lat;
    ab.ldc = H * L;
    ab.dtype = t;
    ab.b_kn = true;
    ab.batch = H;
    ab.stride_a = Dqk;
    ab.stride_b = (Dn + Dv) * wstride;
    ab.stride_c = L;
    blas::gemm_nt(ab, c.device, s);

    const TensorView q_view = view3(q_lat, t, rows, H, L, H * L, L, c.device);
    const TensorView q_pe = view3(q_rows + Dn * es, t, rows, H, R, H * Dqk, Dqk, c.device);
    const TensorView o_view = view3(o_lat, t, rows, H, L, H * L, L, c.device);
    const TensorView lse_view(lse_rows, DType::kFP32, {rows, H}, c.device);
    LatentLayer ll;
    ll.q = q_view;
    ll.q_pe = &q_pe;
    ll.kv_cache = y.kv_cache;
    if (c.kv_cache_dtype == KvCacheDtype::kFp8) ll.k_scale = &y.k_scale;
    latent->run(ll, o_view, lse ? &lse_view : nullptr, s);

    // out_rows[:, h] = o_lat[:, h] W_UV[h]^T: W_UV[h] is kv_b_proj's rows [h (Dn + Dv) + Dn, + Dv), [Dv, L].
    blas::GemmArgs pv{};
    pv.m = rows;
    pv.n = Dv;
    pv.k = L;
    pv.a = o_lat;
    pv.lda = H * L;
    pv.b = static_cast<const uint8_t*>(y.kv_b_proj.data) + Dn * wstride * static_cast<int64_t>(es);
    pv.ldb = wstride;
    pv.c = o_rows;
    pv.ldc = H * Dv;
    pv.dtype = t;
    pv.batch = H;
    pv.stride_a = L;
    pv.stride_b = (Dn + Dv) * wstride;
    pv.stride_c = Dv;
    blas::gemm_nt(pv, c.device, s);

    mla::RowCopyArgs back{};
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
    ops->copy_rows(back, s);
    if (lse) {
      mla::RowCopyArgs l = back;
      l.src = lse_rows;
      l.src_row = H;
      l.src_head = 1;
      l.dst = lse->data;
      l.dst_row = lse->strides[0];
      l.dst_head = lse->strides[1];
      l.width = 1;
      l.elem_bytes = 4;
      ops->copy_rows(l, s);
    }
  }
};

WorkspaceSizes MlaStep::workspace_sizes(const MlaConfig& config) {
  const Setup s = setup(config);
  WorkspaceSizes w{backend::PlanStaging::host_bytes(s.layout.plan_bytes),
                   backend::PlanStaging::device_bytes(s.layout.plan_bytes, s.choice.scratch_bytes) +
                       s.layout.buffer_bytes};
  if (s.absorb_max_query_len > 0) {
    const WorkspaceSizes l = LatentAttention::workspace_sizes(s.latent);
    w.host_bytes += l.host_bytes;
    w.device_bytes += l.device_bytes;
  }
  return w;
}

MlaStep::MlaStep(const MlaConfig& config) : impl_(std::make_unique<Impl>(config, setup(config))) {}
MlaStep::~MlaStep() = default;

void MlaStep::plan(const MlaBatch& batch, const MlaPlanOptions& options, Stream stream) {
  Impl& m = *impl_;
  // Everything is checked before the staging buffer or the current plan is touched.
  const mla::BatchTotals totals =
      mla::check_batch(m.config, m.layout, batch, options, m.absorb_max_query_len, m.absorbed.data());
  uint8_t* block = m.staging->begin();
  try {
    m.builder->build(batch, options, totals, block, &m.plan, m.absorbed.data());
    if (m.latent) m.plan_latent(batch, options, stream);
  } catch (...) {
    // Only an internal limit can fail here, after the checks above; the step's plan (and, with
    // upload_in_run, the staging a captured graph uploads) is then partly rewritten: refuse to
    // run until the next successful plan.
    m.planned = false;
    throw;
  }
  m.staging->publish(m.plan.used_bytes, stream);
  m.planned = true;
  MlaPlanInfo& i = m.info;
  i.batch_size = batch.batch_size;
  i.total_q = totals.total_q;
  i.total_context = totals.total_context;
  i.chunked = totals.chunked;
  i.num_context_chunks = static_cast<int>(m.plan.launches.size()) - 1;
  i.launch_rows = m.plan.launches[0].rows;
  i.visible_pairs = m.plan.visible_pairs + (m.latent ? m.latent->info().visible_pairs : 0);
  i.absorbed_requests = totals.absorbed.requests;
  i.absorbed_tokens = totals.absorbed.tokens;
  i.absorb_max_query_len = m.absorb_max_query_len;
}

int64_t MlaStep::absorbed_tokens(const MlaBatch& batch) const {
  const Impl& m = *impl_;
  return mla::choose_absorbed(batch, m.absorb_max_query_len, m.layout.max_absorbed, nullptr).tokens;
}

int64_t MlaStep::gathered_rows(const MlaBatch& batch) const {
  const Impl& m = *impl_;
  int64_t q = 0;
  for (int r = 0; r < batch.batch_size; ++r) q += batch.query_lens[r];
  return q + mla::choose_absorbed(batch, m.absorb_max_query_len, m.layout.max_absorbed, nullptr).up_context;
}

void MlaStep::run(const MlaLayer& y, const TensorView& out, const TensorView* lse, Stream s) const {
  const Impl& m = *impl_;
  const MlaConfig& c = m.config;
  if (!m.planned) throw Error(ErrorKind::kInvalidArgument, "plan", "run() called before plan()");
  const int64_t tq = m.plan.totals.total_q;
  mla::check_layer(c, y, out, lse, mla::TensorRules{tq, c.device.is_cuda()});
  m.staging->upload(s);  // upload_in_run: the plan's copy ahead of this run's launches, if owed

  // Per launch: gather (the first also writes the new tokens into the cache), up-projection,
  // attention. No kernel of its own for the cache write.
  if (!m.plan.totals.chunked) {
    // One launch over [context; new] per request.
    m.launch(0, y, out, lse, s);
    m.absorbed_part(y, out, lse, s);
    return;
  }
  // Chunked: the new tokens first, then each context chunk merged into (out, lse) by LSE.
  const int64_t H = c.num_heads;
  TensorView lse_run = lse ? first_rows(*lse, tq)
                           : TensorView(m.buffers + m.layout.lse_offset, DType::kFP32, {tq, H}, c.device);
  const TensorView out_q = first_rows(out, tq);
  m.launch(0, y, out, &lse_run, s);
  const TensorView chunk_out = view3(m.buffers + m.layout.chunk_out_offset, c.dtype, tq, H, c.v_head_dim,
                                     H * c.v_head_dim, c.v_head_dim, c.device);
  const TensorView chunk_lse(m.buffers + m.layout.chunk_lse_offset, DType::kFP32, {tq, H}, c.device);
  for (size_t i = 1; i < m.plan.launches.size(); ++i) {
    m.launch(static_cast<int>(i), y, chunk_out, &chunk_lse, s);
    m.backend->merge(out_q, lse_run, chunk_out, chunk_lse, out_q, &lse_run, s);
  }
  m.absorbed_part(y, out, lse, s);
}

const MlaConfig& MlaStep::config() const { return impl_->config; }
MlaPlanInfo MlaStep::info() const { return impl_->info; }
bool MlaStep::planned() const { return impl_->planned; }

}  // namespace mlakit
