// RaggedPrefill: the API glue. The jobs live elsewhere: config and run()-time checks in
// core/prefill_checks, tensor rules in plan/validate*, schedule building in plan/schedule_block,
// workspaces and staging in core/plan_staging, launches behind the backend seam (core/backend.h).
#include "mlakit/prefill.h"

#include <algorithm>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/plan_staging.h"
#include "core/prefill_checks.h"
#include "mlakit/error.h"
#include "plan/kernel_select.h"
#include "plan/schedule_block.h"
#include "contract/schedule_layout.h"
#include "plan/scheduler.h"
#include "plan/validate.h"
#include "plan/validate_split.h"

namespace mlakit {

namespace {

struct Setup {
  std::unique_ptr<backend::Backend> backend;
  cuda::KernelChoice choice;
  plan::ScheduleLayout layout;
};

Setup setup(const PrefillConfig& c) {
  backend::check_config(c);
  Setup s;
  s.backend = backend::make_backend(c.device, "config.device");
  s.choice = s.backend->choose_kernel(c.head_dim_qk, c.head_dim_vo, c.dtype, plan::output_dtype(c), c.num_qo_heads,
                                      c.kernel);
  plan::size_kv_split(s.choice, c.kv_split, c.max_batch, c.max_q_tokens, c.num_qo_heads);
  s.layout = plan::make_layout(c.max_batch, c.max_q_tokens, s.choice.block_m,
                               static_cast<plan::ScheduleKind>(s.choice.schedule_kind));
  return s;
}

// Host staging: two copies of the schedule block; device: one, then the kernel's scratch.
WorkspaceSizes sizes_for(const Setup& s) {
  return {backend::PlanStaging::host_bytes(s.layout.total_bytes),
          backend::PlanStaging::device_bytes(s.layout.total_bytes, s.choice.scratch_bytes)};
}

}  // namespace

struct RaggedPrefill::Impl {
  PrefillConfig config;
  std::unique_ptr<backend::Backend> backend;
  cuda::KernelChoice choice{};
  plan::ScheduleLayout layout{};
  plan::Scheduler scheduler;
  std::unique_ptr<backend::PlanStaging> staging;

  bool planned = false;
  PrefillOptions options;
  PlanInfo info;
  plan::IndptrTotals totals;

  Impl(const PrefillConfig& c, Setup s)
      : config(c),
        backend(std::move(s.backend)),
        choice(s.choice),
        layout(s.layout),
        scheduler(c.max_batch, c.max_q_tokens, c.max_kv_tokens, s.choice.block_m, s.choice.block_n,
                  plan::kv_split_settings(s.choice)) {
    info.kernel_arch = choice.arch;  // known before the first plan
    info.cpu_isa = backend->cpu_isa(c.dtype, c.dtype == DType::kE4M3 ? c.out_dtype : c.dtype);
    info.kv_split = choice.split_slots > 0;  // size_kv_split sizes slots only for a rule it turned on
  }

  backend::AttentionCall call(const TensorView& q, const TensorView& k, const TensorView* k_rope,
                              const TensorView& v, const TensorView& out, const TensorView* lse,
                              const Descales& descales) const {
    backend::AttentionCall a;
    a.q = &q;
    a.k = &k;
    a.k_rope = k_rope;
    a.v = &v;
    a.out = &out;
    a.lse = lse;
    a.head_dim_qk = config.head_dim_qk;
    a.head_dim_vo = config.head_dim_vo;
    a.num_qo_heads = config.num_qo_heads;
    a.num_kv_heads = config.num_kv_heads;
    a.dtype = config.dtype;
    a.out_dtype = plan::output_dtype(config);
    a.descales = descales;
    a.schedule = {staging->device(), layout};
    a.scratch = staging->scratch();
    return a;
  }

  plan::TensorRules rules() const {
    plan::TensorRules r;
    r.out_matches_input_dtype = true;
    r.allow_fp32_fp64_inputs = false;
    r.need_16B_alignment = config.device.is_cuda();
    r.config = &config;  // tensors vs the config first: errors then name the config field
    return r;
  }

  void require_plan() const {
    if (!planned) throw Error(ErrorKind::kInvalidArgument, "plan", "run() called before plan()");
  }

  void check_descales(const Descales& d) const {
    plan::validate_descales(d, config.dtype, config.device, info.batch_size, config.num_kv_heads);
  }
};

WorkspaceSizes RaggedPrefill::workspace_sizes(const PrefillConfig& config) {
  return sizes_for(setup(config));
}

RaggedPrefill::RaggedPrefill(const PrefillConfig& config) {
  auto impl = std::make_unique<Impl>(config, setup(config));
  impl->staging = std::make_unique<backend::PlanStaging>(*impl->backend, impl->layout.total_bytes,
                                                         impl->choice.scratch_bytes);
  impl_ = std::move(impl);
}

RaggedPrefill::RaggedPrefill(const PrefillConfig& config, void* host_workspace, size_t host_bytes,
                             void* device_workspace, size_t device_bytes) {
  Setup s = setup(config);
  const WorkspaceSizes need = sizes_for(s);
  auto impl = std::make_unique<Impl>(config, std::move(s));
  backend::check_workspace(host_workspace, host_bytes, need.host_bytes, "host_workspace");
  backend::check_workspace(device_workspace, device_bytes, need.device_bytes, "device_workspace");
  impl->staging = std::make_unique<backend::PlanStaging>(*impl->backend, impl->layout.total_bytes,
                                                         impl->choice.scratch_bytes, host_workspace,
                                                         device_workspace);
  impl_ = std::move(impl);
}

RaggedPrefill::~RaggedPrefill() = default;

void RaggedPrefill::plan(const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                         const PrefillOptions& options, Stream stream) {
  Impl& m = *impl_;
  // Everything is checked before the staging buffer or the current plan is touched.
  const plan::IndptrTotals totals = plan::validate_indptr(qo_indptr, kv_indptr, batch_size);
  plan::validate_options(options);
  backend::check_capacity(m.config, batch_size, totals);

  uint8_t* block = m.staging->begin();
  const plan::ScheduleKind kind = static_cast<plan::ScheduleKind>(m.choice.schedule_kind);
  const plan::ScheduleResult r =
      plan::write_schedule_block(block, m.layout, m.scheduler, qo_indptr, kv_indptr, batch_size, options,
                                 m.config.head_dim_qk, kind, m.config.num_qo_heads, m.choice.grid_blocks);
  m.staging->publish(plan::block_used_bytes(m.layout, kind, r), stream);

  m.planned = true;
  m.options = options;
  m.totals = totals;
  PlanInfo& info = m.info;
  info.batch_size = batch_size;
  info.total_q = totals.total_q;
  info.total_kv = totals.total_kv;
  info.num_tiles = r.num_tiles;
  info.block_m = m.choice.block_m;
  info.block_n = m.choice.block_n;
  info.grid_blocks = m.choice.grid_blocks;
  info.visible_pairs = r.visible_pairs;
  info.split_slots = r.split_slots;
}

void RaggedPrefill::run(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView* lse, Stream stream) const {
  run(q, k, v, out, lse, Descales{}, stream);
}

void RaggedPrefill::run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const TensorView* lse, const Descales& descales, Stream stream) const {
  const Impl& m = *impl_;
  m.require_plan();
  plan::validate_prefill_tensors(q, k, v, out, lse, m.totals, m.rules());
  m.check_descales(descales);
  m.backend->attention(m.choice, m.call(q, k, nullptr, v, out, lse, descales), stream);
}

void RaggedPrefill::run_split_k(const TensorView& q, const TensorView& k, const TensorView& k_rope,
                                const TensorView& v, const TensorView& out, const TensorView* lse,
                                Stream stream) const {
  run_split_k(q, k, k_rope, v, out, lse, Descales{}, stream);
}

void RaggedPrefill::run_split_k(const TensorView& q, const TensorView& k, const TensorView& k_rope,
                                const TensorView& v, const TensorView& out, const TensorView* lse,
                                const Descales& descales, Stream stream) const {
  const Impl& m = *impl_;
  m.require_plan();
  const TensorView kr = plan::validate_split_k_tensors(q, k, k_rope, v, out, lse, m.totals, m.rules());
  m.check_descales(descales);
  m.backend->attention(m.choice, m.call(q, k, &kr, v, out, lse, descales), stream);
}

const PrefillConfig& RaggedPrefill::config() const { return impl_->config; }
const PrefillOptions& RaggedPrefill::options() const { return impl_->options; }
PlanInfo RaggedPrefill::info() const { return impl_->info; }
bool RaggedPrefill::planned() const { return impl_->planned; }

void ragged_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                    const int32_t* qo_indptr_host, const int32_t* kv_indptr_host, int batch_size,
                    const PrefillOptions& options, const TensorView& out, const TensorView* lse,
                    Stream stream) {
  // Validate against the batch itself first so errors name the tensors, not a derived config.
  const plan::IndptrTotals totals = plan::validate_indptr(qo_indptr_host, kv_indptr_host, batch_size);
  plan::validate_options(options);
  plan::TensorRules rules;
  rules.need_16B_alignment = q.device.is_cuda();
  plan::validate_prefill_tensors(q, k, v, out, lse, totals, rules);

  PrefillConfig c;
  c.num_qo_heads = static_cast<int>(q.shape[1]);
  c.num_kv_heads = static_cast<int>(k.shape[1]);
  c.head_dim_qk = static_cast<int>(q.shape[2]);
  c.head_dim_vo = static_cast<int>(v.shape[2]);
  c.dtype = q.dtype;
  c.out_dtype = out.dtype;  // read for e4m3 inputs (validated above: bf16 or fp16)
  c.max_batch = std::max(batch_size, 1);
  c.max_q_tokens = std::max<int64_t>(totals.total_q, 1);
  c.max_kv_tokens = std::max<int64_t>(totals.total_kv, 1);
  c.device = q.device;
  RaggedPrefill p(c);
  p.plan(qo_indptr_host, kv_indptr_host, batch_size, options, stream);
  p.run(q, k, v, out, lse, stream);
}

}  // namespace mlakit
