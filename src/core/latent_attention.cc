// LatentAttention: the API glue. Checks live in plan/latent_checks, the plan block in
// plan/latent_schedule (its layout in contract/latent_layout.h), staging and upload in
// core/plan_staging, the launch behind the backend seam (core/backend.h).
#include "mlakit/latent.h"

#include <memory>
#include <string>

#include "contract/latent_layout.h"
#include "core/backend.h"
#include "core/latent_args.h"
#include "core/plan_staging.h"
#include "mlakit/error.h"
#include "plan/latent_checks.h"
#include "plan/latent_schedule.h"

namespace mlakit {

namespace {

struct Setup {
  std::unique_ptr<backend::Backend> backend;
  backend::LatentChoice choice;
  latent::LatentLayout layout;
  size_t partial_bytes = 0;
  size_t decoded_bytes = 0;  // the bf16 workspace of FP8 rows decoded once, after the partials
};

Setup setup(const LatentConfig& c) {
  plan::check_latent_config(c);
  Setup s;
  s.backend = backend::make_backend(c.device, "config.device");
  s.choice = s.backend->choose_latent(c);
  s.layout = latent::make_layout(c.num_heads, s.choice.block_rows, c.block_size, c.max_batch, c.max_q_tokens,
                                 c.max_kv_tokens, c.max_topk, s.choice.split_size, s.choice.decoded_rows);
  // The block's offsets and the partial rows are int32 in the layout.
  if (s.layout.total_bytes > static_cast<size_t>(INT32_MAX) || s.layout.max_partial_rows > INT32_MAX / 1024) {
    throw Error(ErrorKind::kInvalidArgument, "config.max_q_tokens",
                "the capacities (max_batch, max_q_tokens, max_kv_tokens, max_topk) need a plan of " +
                    std::to_string(s.layout.total_bytes) + " bytes and " +
                    std::to_string(s.layout.max_partial_rows) + " partial rows; lower them");
  }
  s.partial_bytes = backend::latent_partial_bytes(s.layout.max_partial_rows, c.kv_lora_rank);
  s.decoded_bytes = static_cast<size_t>(s.choice.decoded_rows) * (c.kv_lora_rank + c.qk_rope_head_dim) * 2;
  return s;
}

}  // namespace

struct LatentAttention::Impl {
  LatentConfig config;
  std::unique_ptr<backend::Backend> backend;
  backend::LatentChoice choice;
  latent::LatentLayout layout;
  plan::LatentScheduler scheduler;
  std::unique_ptr<backend::PlanStaging> staging;
  void* partials = nullptr;
  void* decoded = nullptr;  // in the partials' allocation, 256-byte aligned

  bool planned = false;
  LatentPlanOptions options;
  plan::LatentTotals totals;
  LatentPlanInfo info;

  Impl(const LatentConfig& c, Setup s)
      : config(c),
        backend(std::move(s.backend)),
        choice(s.choice),
        layout(s.layout),
        scheduler(c, s.layout, s.choice.block_rows, s.choice.split_size, s.choice.workers) {
    staging = std::make_unique<backend::PlanStaging>(
        *backend, layout.total_bytes, 0,
        c.upload_in_run ? backend::PlanStaging::Upload::kInRun : backend::PlanStaging::Upload::kInPlan);
    // Never zeroed: every partial row a merge reads is written by its split first. On the CPU
    // the pages are committed only where a plan writes.
    const size_t partial_bytes = latent::align_to(s.partial_bytes, 256);
    if (partial_bytes + s.decoded_bytes > 0) partials = backend->alloc_device(partial_bytes + s.decoded_bytes);
    if (s.decoded_bytes > 0) decoded = static_cast<uint8_t*>(partials) + partial_bytes;
    info.block_rows = choice.block_rows;
    info.kv_split_size = choice.split_size;
    info.cpu_isa = backend->cpu_isa(c.dtype, c.dtype);
  }
  ~Impl() {
    backend->drain();
    backend->free_device(partials);
  }
};

WorkspaceSizes LatentAttention::workspace_sizes(const LatentConfig& config) {
  const Setup s = setup(config);
  return {backend::PlanStaging::host_bytes(s.layout.total_bytes),
          backend::PlanStaging::device_bytes(s.layout.total_bytes, 0) + latent::align_to(s.partial_bytes, 256) +
              s.decoded_bytes};
}

LatentAttention::LatentAttention(const LatentConfig& config) : impl_(std::make_unique<Impl>(config, setup(config))) {}
LatentAttention::~LatentAttention() = default;

void LatentAttention::plan(const LatentBatch& batch, const LatentPlanOptions& options, Stream stream) {
  Impl& m = *impl_;
  // Everything is checked before the staging buffer or the current plan is touched.
  const plan::LatentTotals totals = plan::check_latent_plan(m.config, batch, options);
  uint8_t* block = m.staging->begin();
  plan::LatentScheduleResult r;
  try {
    r = m.scheduler.build(batch, options, totals, block);
  } catch (...) {
    // Only an internal limit can fail here; the staging (which a captured graph may upload
    // with upload_in_run) is then partly rewritten: refuse to run until the next plan.
    m.planned = false;
    throw;
  }
  m.staging->publish(r.used_bytes, stream);
  m.planned = true;
  m.options = options;
  m.totals = totals;
  LatentPlanInfo& i = m.info;
  i.batch_size = batch.batch_size;
  i.total_q = totals.total_q;
  i.total_kv = totals.total_kv;
  i.sparse = options.topk > 0;
  i.topk = options.topk;
  i.num_items = r.num_items;
  i.num_merges = r.num_merges;
  i.partial_rows = r.partial_rows;
  i.visible_pairs = r.visible_pairs;
  i.kv_split_size = r.split_size;
  i.decoded_rows = r.decoded_rows;
}

void LatentAttention::run(const LatentLayer& layer, const TensorView& out, const TensorView* lse, Stream stream) const {
  const Impl& m = *impl_;
  if (!m.planned) throw Error(ErrorKind::kInvalidArgument, "plan", "run() called before plan()");
  plan::LatentTensorRules rules;
  rules.cuda = m.config.device.is_cuda();
  plan::check_latent_tensors(m.config, m.options, m.totals, layer, out, lse, rules);
  m.staging->upload(stream);  // upload_in_run: the plan's copy ahead of this run's launch, if owed
  m.backend->latent_attention(backend::make_latent_args(m.config, layer, out, lse, m.staging->device(), m.partials,
                                                        m.layout.max_partial_rows, m.decoded, m.choice.decoded_rows),
                              stream);
}

const LatentConfig& LatentAttention::config() const { return impl_->config; }
const LatentPlanOptions& LatentAttention::options() const { return impl_->options; }
LatentPlanInfo LatentAttention::info() const { return impl_->info; }
bool LatentAttention::planned() const { return impl_->planned; }

}  // namespace mlakit
