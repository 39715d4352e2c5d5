// MlaStep: the API glue of the MLA prefill step. Validation lives in mla_checks, the plan block in
// mla_plan_build / mla_layout, device work behind three seams: attention (core/backend.h), the
// gather with its fused cache write (mla_ops.h), the up-projection (blas.h). Absorbed requests and
// DeepSeek-V3.2's sparse tokens take mla/absorbed_path (a V3.2 batch split by mla/sparse_split).
#include "mlakit/mla.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/plan_staging.h"
#include "mla/absorbed_path.h"
#include "mla/blas.h"
#include "mla/mla_checks.h"
#include "mla/mla_layout.h"
#include "mla/mla_ops.h"
#include "mla/mla_plan_build.h"
#include "mla/sparse_split.h"
#include "plan/kernel_select.h"
#include "plan/schedule_block.h"
#include "mlakit/error.h"
#include "mlakit/latent.h"

namespace mlakit {

namespace {

struct Setup {
  std::unique_ptr<backend::Backend> backend;
  cuda::KernelChoice choice{};
  // The config the step's plan is built for: a sparse step's batch is split into up to two parts
  // a request (sparse_split.h), so with max_topk > 0 it holds twice max_batch (and the parts'
  // contexts).
  MlaConfig inner;
  mla::MlaLayout layout;
  mla::AbsorbSetup absorb;
};

Setup setup(const MlaConfig& c) {
  mla::check_config(c);
  Setup s;
  s.inner = c;
  if (c.max_topk > 0) {
    // A part past top-k counts its request's context and dense tokens as context: the parts'
    // contexts add up to at most twice the step's context and its new tokens. The workspace
    // stays the config's.
    s.inner.max_batch = 2 * c.max_batch;
    s.inner.max_context_tokens = 2 * c.max_context_tokens + c.max_tokens;
    s.inner.workspace_rows = c.workspace_rows > 0 ? c.workspace_rows : c.max_tokens + c.max_context_tokens;
  }
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
  plan::size_kv_split(s.choice, c.kv_split, s.inner.max_batch, c.max_tokens, c.num_heads);
  s.absorb = mla::resolve_absorb(c);
  s.layout = mla::make_layout(s.inner, s.choice.block_m, s.absorb.enabled ? s.absorb.latent.max_q_tokens : 0);
  return s;
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
  MlaConfig inner;  // Setup::inner
  // Absorbed requests and sparse steps: the latent attention path, the choice of the last plan
  // (per part of the planned batch), and the split of a sparse step into parts.
  mla::AbsorbRule absorb_rule;
  std::unique_ptr<mla::AbsorbedPath> absorbed_path;
  std::vector<uint8_t> absorbed;
  std::unique_ptr<mla::SparseSplit> split;

  bool planned = false;
  mla::StepPlan plan;
  int plan_topk = 0;  // options.topk of the plan in force
  MlaPlanInfo info;

  Impl(const MlaConfig& c, Setup s)
      : config(c),
        backend(std::move(s.backend)),
        choice(s.choice),
        layout(s.layout),
        inner(s.inner),
        absorb_rule(s.absorb.rule),
        absorbed(static_cast<size_t>(s.inner.max_batch), 0) {
    info.absorb_max_query_len = absorb_rule.max_query_len;
    if (c.max_topk > 0) split = std::make_unique<mla::SparseSplit>(c.max_batch);
    ops = mla::make_ops(c.device);
    // cuBLASLt's handle is created on first use; do it here, never inside a graph capture.
    if (c.device.is_cuda()) cuda::blas::init(c.device.index);
    staging = std::make_unique<backend::PlanStaging>(
        *backend, layout.plan_bytes, choice.scratch_bytes,
        c.upload_in_run ? backend::PlanStaging::Upload::kInRun : backend::PlanStaging::Upload::kInPlan);
    builder = std::make_unique<mla::PlanBuilder>(inner, layout, choice);
    if (s.absorb.enabled) absorbed_path = std::make_unique<mla::AbsorbedPath>(config, s.absorb.latent, *ops, layout);
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
    v.q = mla::view3(buffers + layout.q8_offset, DType::kE4M3, plan.totals.total_q, c.num_heads, dqk, c.num_heads * dqk, dqk,
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
    const TensorView k = mla::view3(kv_a, at, layout.rows, c.num_heads, c.qk_nope_head_dim, layout.kv_width, hd, c.device);
    const TensorView v = mla::view3(kv_a + c.qk_nope_head_dim * aes, at, layout.rows, c.num_heads, c.v_head_dim,
                               layout.kv_width, hd, c.device);
    const TensorView k_rope = mla::view3(rope_a, at, layout.rows, 1, c.qk_rope_head_dim, rope_stride, 0, c.device);
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

  // Absorbed requests, after the launches above wrote their new tokens into the cache. Sized by
  // the plan: the absorbed tokens (eager), or what a captured step covers for any plan.
  void absorbed_part(const MlaLayer& y, const TensorView& out, const TensorView* lse, Stream s) const {
    if (absorbed_path && plan.totals.absorbed_rows > 0) {
      absorbed_path->run(y, out, lse, plan.totals.absorbed_rows, ws(), buffers, s);
    }
  }
};

WorkspaceSizes MlaStep::workspace_sizes(const MlaConfig& config) {
  const Setup s = setup(config);
  WorkspaceSizes w{backend::PlanStaging::host_bytes(s.layout.plan_bytes),
                   backend::PlanStaging::device_bytes(s.layout.plan_bytes, s.choice.scratch_bytes) +
                       s.layout.buffer_bytes};
  if (s.absorb.enabled) {
    const WorkspaceSizes l = LatentAttention::workspace_sizes(s.absorb.latent);
    w.host_bytes += l.host_bytes;
    w.device_bytes += l.device_bytes;
  }
  return w;
}

MlaStep::MlaStep(const MlaConfig& config) : impl_(std::make_unique<Impl>(config, setup(config))) {}
MlaStep::~MlaStep() = default;

void MlaStep::plan(const MlaBatch& batch, const MlaPlanOptions& options, Stream stream) {
  Impl& m = *impl_;
  // Everything is checked before the staging buffer or the current plan is touched. A sparse
  // step (DeepSeek-V3.2) is checked as the caller gave it, then planned as its parts.
  const MlaBatch* planned_batch = &batch;
  const uint8_t* sparse = nullptr;
  int64_t total_context = -1;  // of the batch as given (a part past top-k counts tokens as context)
  if (options.topk > 0 && m.split) {
    MlaPlanOptions whole = options;
    whole.graph_rows = 0;  // the parts' gathered rows are checked below
    whole.graph_absorbed_tokens = -1;
    total_context = mla::check_batch(m.config, m.layout, batch, whole).total_context;
    planned_batch = &m.split->split(batch, options.topk);
    sparse = m.split->sparse();
  }
  // The parts of a sparse step against the config they are planned for; any other batch against
  // the caller's config (its capacities, not the parts').
  const mla::BatchTotals totals =
      mla::check_batch(sparse ? m.inner : m.config, m.layout, *planned_batch, options,
                       sparse ? mla::AbsorbRule() : m.absorb_rule, m.absorbed.data(), sparse);
  PrefillOptions prefill;  // the scale rule of the step's prefill launches, for the latent ones too
  prefill.sm_scale = options.sm_scale;
  const float scale = plan::resolve_sm_scale(prefill, m.config.qk_nope_head_dim + m.config.qk_rope_head_dim);
  uint8_t* block = m.staging->begin();
  try {
    m.builder->build(*planned_batch, options, totals, block, &m.plan, m.absorbed.data());
    if (m.absorbed_path) m.absorbed_path->plan(*planned_batch, m.absorbed.data(), scale, options.topk, stream);
  } catch (...) {
    // Only an internal limit can fail here, after the checks above; the step's plan (and, with
    // upload_in_run, the staging a captured graph uploads) is then partly rewritten: refuse to
    // run until the next successful plan.
    m.planned = false;
    throw;
  }
  m.staging->publish(m.plan.used_bytes, stream);
  m.planned = true;
  m.plan_topk = options.topk;
  MlaPlanInfo& i = m.info;
  i.batch_size = batch.batch_size;
  i.total_q = totals.total_q;
  i.total_context = total_context >= 0 ? total_context : totals.total_context;
  i.chunked = totals.chunked;
  i.num_context_chunks = static_cast<int>(m.plan.launches.size()) - 1;
  i.launch_rows = m.plan.launches[0].rows;
  i.visible_pairs = m.plan.visible_pairs + (m.absorbed_path ? m.absorbed_path->visible_pairs() : 0);
  i.absorbed_requests = totals.absorbed.requests;
  i.absorbed_tokens = totals.absorbed.tokens;
  i.absorb_max_query_len = m.absorb_rule.max_query_len;
  i.sparse_tokens = sparse ? m.split->sparse_tokens() : 0;
}

namespace {
// What a step of `batch` would absorb, for the const queries below. A sparse step is split into
// its parts by a SparseSplit of its own: the step's one belongs to plan(), and a query must not
// change it (nor race with another thread's query).
mla::AbsorbChoice choose_for_query(const MlaConfig& c, const mla::MlaLayout& layout, const mla::AbsorbRule& rule,
                                     const MlaBatch& batch, int topk) {
  if (topk > 0 && c.max_topk > 0) {
    mla::SparseSplit split(batch.batch_size);
    const MlaBatch& parts = split.split(batch, topk);
    return mla::choose_absorbed(parts, mla::AbsorbRule(), layout.max_absorbed, nullptr, split.sparse());
  }
  return mla::choose_absorbed(batch, rule, layout.max_absorbed, nullptr);
}
}  // namespace

int64_t MlaStep::absorbed_tokens(const MlaBatch& batch, int topk) const {
  const Impl& m = *impl_;
  return choose_for_query(m.config, m.layout, m.absorb_rule, batch, topk).tokens;
}

int64_t MlaStep::gathered_rows(const MlaBatch& batch, int topk) const {
  const Impl& m = *impl_;
  int64_t q = 0;
  for (int r = 0; r < batch.batch_size; ++r) q += batch.query_lens[r];
  return q + choose_for_query(m.config, m.layout, m.absorb_rule, batch, topk).up_context;
}

void MlaStep::run(const MlaLayer& y, const TensorView& out, const TensorView* lse, Stream s) const {
  const Impl& m = *impl_;
  const MlaConfig& c = m.config;
  if (!m.planned) throw Error(ErrorKind::kInvalidArgument, "plan", "run() called before plan()");
  const int64_t tq = m.plan.totals.total_q;
  mla::check_layer(c, y, out, lse, mla::TensorRules{tq, c.device.is_cuda()});
  if (m.plan_topk > 0) mla::check_sparse_layer(c, y, tq, m.plan_topk, c.device.is_cuda());
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
  const TensorView chunk_out = mla::view3(m.buffers + m.layout.chunk_out_offset, c.dtype, tq, H, c.v_head_dim,
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
