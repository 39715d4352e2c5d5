// RaggedPrefill: config checks, workspaces, plan() (schedule into host staging, then one copy
// into the device workspace) and run() (validate, then one backend call that reads the plan
// from the device workspace).
#include "mlakit/prefill.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "cpu/cpu_backend.h"
#include "cuda/common/host_sync.h"
#include "cuda/prefill_launch.h"
#include "mlakit/error.h"
#include "mlakit/runtime.h"
#include "plan/schedule_layout.h"
#include "plan/scheduler.h"
#include "plan/validate.h"

namespace mlakit {

namespace {

constexpr int kCpuBlockM = 64;
constexpr int kCpuBlockN = 64;
constexpr int kMaxCpuHeadDim = 512;
constexpr size_t kWorkspaceAlign = 256;

[[noreturn]] void bad_config(const char* name, const std::string& msg,
                             ErrorKind kind = ErrorKind::kInvalidArgument) {
  throw Error(kind, name, msg);
}

// Checks everything about a config that does not need memory, and picks the tile shape.
cuda::KernelChoice check_config(const PrefillConfig& c) {
  if (c.num_qo_heads <= 0) bad_config("config.num_qo_heads", "must be > 0");
  if (c.num_kv_heads <= 0) bad_config("config.num_kv_heads", "must be > 0");
  if (c.num_qo_heads % c.num_kv_heads != 0) {
    bad_config("config.num_kv_heads", "num_qo_heads (" + std::to_string(c.num_qo_heads) +
                                          ") must be a multiple of num_kv_heads (" +
                                          std::to_string(c.num_kv_heads) + ")");
  }
  if (c.head_dim_qk <= 0) bad_config("config.head_dim_qk", "must be > 0");
  if (c.head_dim_vo <= 0) bad_config("config.head_dim_vo", "must be > 0");
  if (c.dtype != DType::kBF16 && c.dtype != DType::kFP16) {
    bad_config("config.dtype", std::string("must be bf16 or fp16, got ") + dtype_name(c.dtype),
               ErrorKind::kTypeMismatch);
  }
  if (c.max_batch <= 0) bad_config("config.max_batch", "must be > 0");
  if (c.max_q_tokens <= 0 || c.max_q_tokens > INT32_MAX) {
    bad_config("config.max_q_tokens", "must be in 1 .. 2^31-1 (indptr arrays are int32)");
  }
  if (c.max_kv_tokens <= 0 || c.max_kv_tokens > INT32_MAX) {
    bad_config("config.max_kv_tokens", "must be in 1 .. 2^31-1 (indptr arrays are int32)");
  }
  if (c.device.is_cpu()) {
    if (c.head_dim_qk > kMaxCpuHeadDim) {
      bad_config("config.head_dim_qk", "the CPU backend supports head dims 1..512", ErrorKind::kUnsupported);
    }
    if (c.head_dim_vo > kMaxCpuHeadDim) {
      bad_config("config.head_dim_vo", "the CPU backend supports head dims 1..512", ErrorKind::kUnsupported);
    }
    unsigned hw = std::thread::hardware_concurrency();
    return cuda::KernelChoice{kCpuBlockM, kCpuBlockN, static_cast<int>(hw ? hw : 1), 0};
  }
  if (!c.device.is_cuda()) bad_config("config.device", "unknown device type", ErrorKind::kUnsupported);
  if (cuda_device_count() <= 0) bad_config("config.device", cuda_unavailable_reason(), ErrorKind::kUnsupported);
  if (c.device.index < 0 || c.device.index >= cuda_device_count()) {
    bad_config("config.device", to_string(c.device) + " does not exist", ErrorKind::kUnsupported);
  }
  if (!cuda::prefill_supported(c.head_dim_qk, c.head_dim_vo, c.dtype)) {
    bad_config("config.head_dim_qk",
               "no CUDA kernel for (head_dim_qk, head_dim_vo) = (" + std::to_string(c.head_dim_qk) +
                   ", " + std::to_string(c.head_dim_vo) + ") in " + dtype_name(c.dtype),
               ErrorKind::kUnsupported);
  }
  return cuda::choose_prefill_kernel(c.head_dim_qk, c.head_dim_vo, c.dtype, c.num_qo_heads, c.device,
                                     c.kernel);
}

// Host staging holds two copies of the schedule block (double buffer, see plan()); the device
// workspace holds one, then the kernel's scratch (KernelChoice::scratch_bytes, 256-aligned).
WorkspaceSizes sizes_for(const plan::ScheduleLayout& l, const cuda::KernelChoice& k) {
  return {2 * l.total_bytes, l.total_bytes + plan::align_up(k.scratch_bytes, 256)};
}

}  // namespace

struct RaggedPrefill::Impl {
  PrefillConfig config;
  cuda::KernelChoice choice{};
  plan::ScheduleLayout layout{};
  plan::Scheduler scheduler;

  uint8_t* host_ws = nullptr;  // two staging halves of layout.total_bytes
  void* device_ws = nullptr;   // layout.total_bytes on config.device
  bool owns = false;
  cuda_rt::Event events[2] = {nullptr, nullptr};  // CUDA: last copy out of each staging half
  int next_half = 0;

  bool planned = false;
  PrefillOptions options;
  PlanInfo info;
  plan::IndptrTotals totals;

  Impl(const PrefillConfig& c, const cuda::KernelChoice& k)
      : config(c),
        choice(k),
        layout(plan::make_layout(c.max_batch, c.max_q_tokens, k.block_m)),
        scheduler(c.max_batch, c.max_q_tokens, c.max_kv_tokens, k.block_m, k.block_n) {
    info.kernel_arch = k.arch;  // known before the first plan
  }

  bool cuda() const { return config.device.is_cuda(); }

  void create_events() {
    if (!cuda()) return;
    for (auto& e : events) e = cuda_rt::event_create(config.device.index);
  }

  // The kernel's scratch starts zeroed (the sm90 kernel's work counters; each launch leaves
  // them zero again).
  void zero_scratch() {
    if (!cuda() || choice.scratch_bytes == 0) return;
    cuda_rt::memset_async(static_cast<uint8_t*>(device_ws) + layout.total_bytes, 0, choice.scratch_bytes,
                          config.device.index, nullptr);
    cuda_rt::stream_synchronize(config.device.index, nullptr);
  }

  ~Impl() {
    if (cuda()) {
      // Copies or kernels may still read the workspaces; let them finish before release.
      cuda_rt::device_synchronize(config.device.index);
      for (auto& e : events) cuda_rt::event_destroy(e);
    }
    if (owns) {
      pinned_free(host_ws);
      device_free(device_ws, config.device);
    }
  }
};

WorkspaceSizes RaggedPrefill::workspace_sizes(const PrefillConfig& config) {
  const cuda::KernelChoice k = check_config(config);
  return sizes_for(plan::make_layout(config.max_batch, config.max_q_tokens, k.block_m), k);
}

RaggedPrefill::RaggedPrefill(const PrefillConfig& config) {
  const cuda::KernelChoice k = check_config(config);
  impl_ = std::make_unique<Impl>(config, k);
  const WorkspaceSizes s = sizes_for(impl_->layout, k);
  impl_->owns = true;
  impl_->host_ws = static_cast<uint8_t*>(pinned_alloc(s.host_bytes));
  impl_->device_ws = device_alloc(s.device_bytes, config.device);
  impl_->create_events();
  impl_->zero_scratch();
}

RaggedPrefill::RaggedPrefill(const PrefillConfig& config, void* host_workspace, size_t host_bytes,
                             void* device_workspace, size_t device_bytes) {
  const cuda::KernelChoice k = check_config(config);
  auto impl = std::make_unique<Impl>(config, k);
  const WorkspaceSizes need = sizes_for(impl->layout, k);
  auto check_ws = [](const void* p, size_t have, size_t want, const char* name) {
    if (p == nullptr) throw Error(ErrorKind::kInvalidArgument, name, "is null");
    if (reinterpret_cast<uintptr_t>(p) % kWorkspaceAlign != 0) {
      throw Error(ErrorKind::kInvalidArgument, name, "must be 256-byte aligned");
    }
    if (have < want) {
      throw Error(ErrorKind::kInvalidArgument, name,
                  std::to_string(have) + " bytes is less than the " + std::to_string(want) +
                      " bytes workspace_sizes() asks for");
    }
  };
  check_ws(host_workspace, host_bytes, need.host_bytes, "host_workspace");
  check_ws(device_workspace, device_bytes, need.device_bytes, "device_workspace");
  impl->host_ws = static_cast<uint8_t*>(host_workspace);
  impl->device_ws = device_workspace;
  impl->create_events();
  impl->zero_scratch();
  impl_ = std::move(impl);
}

RaggedPrefill::~RaggedPrefill() = default;

void RaggedPrefill::plan(const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                         const PrefillOptions& options, Stream stream) {
  Impl& m = *impl_;
  const PrefillConfig& c = m.config;
  // Everything is checked before the staging buffer or the current plan is touched.
  const plan::IndptrTotals totals = plan::validate_indptr(qo_indptr, kv_indptr, batch_size);
  plan::validate_options(options);
  if (batch_size > c.max_batch) {
    throw Error(ErrorKind::kInvalidArgument, "batch_size",
                std::to_string(batch_size) + " exceeds config.max_batch = " + std::to_string(c.max_batch));
  }
  if (totals.total_q > c.max_q_tokens) {
    throw Error(ErrorKind::kInvalidArgument, "qo_indptr",
                "total q tokens " + std::to_string(totals.total_q) + " exceed config.max_q_tokens = " +
                    std::to_string(c.max_q_tokens));
  }
  if (totals.total_kv > c.max_kv_tokens) {
    throw Error(ErrorKind::kInvalidArgument, "kv_indptr",
                "total kv tokens " + std::to_string(totals.total_kv) + " exceed config.max_kv_tokens = " +
                    std::to_string(c.max_kv_tokens));
  }

  // The half we fill may still be the source of an async copy from two plans ago; that copy
  // was recorded on its event, which has almost always completed by now.
  const int half = m.next_half;
  if (m.cuda()) cuda_rt::event_synchronize(m.events[half]);
  uint8_t* block = m.host_ws + static_cast<size_t>(half) * m.layout.total_bytes;

  const auto kind = static_cast<plan::ScheduleKind>(m.choice.schedule_kind);
  uint8_t* work = block + m.layout.tiles_offset;
  const plan::ScheduleResult r =
      kind == plan::ScheduleKind::kSequenceRuns
          ? m.scheduler.build_runs(qo_indptr, kv_indptr, batch_size, options.causal, options.window_left,
                                   c.num_qo_heads, reinterpret_cast<plan::SeqRun*>(work))
          : m.scheduler.build(qo_indptr, kv_indptr, batch_size, options.causal, options.window_left,
                              reinterpret_cast<plan::WorkTile*>(work));

  plan::ScheduleHeader h{};
  h.num_tiles = r.num_tiles;
  h.batch_size = batch_size;
  h.total_q = static_cast<int32_t>(totals.total_q);
  h.total_kv = static_cast<int32_t>(totals.total_kv);
  h.causal = options.causal ? 1 : 0;
  h.window_left = options.window_left;
  h.sm_scale = options.sm_scale > 0.0f ? options.sm_scale
                                       : static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim_qk)));
  h.sm_scale_log2 = static_cast<float>(static_cast<double>(h.sm_scale) * 1.4426950408889634);
  h.soft_cap = options.logits_soft_cap;
  h.block_m = m.choice.block_m;
  h.block_n = m.choice.block_n;
  h.schedule_kind = static_cast<int32_t>(kind);
  h.num_runs = r.num_runs;
  h.num_items = static_cast<int32_t>(static_cast<int64_t>(r.num_tiles) * c.num_qo_heads);
  std::memcpy(block, &h, sizeof(h));
  const size_t indptr_bytes = sizeof(int32_t) * (static_cast<size_t>(batch_size) + 1);
  std::memcpy(block + m.layout.qo_indptr_offset, qo_indptr, indptr_bytes);
  std::memcpy(block + m.layout.kv_indptr_offset, kv_indptr, indptr_bytes);

  const size_t used =
      m.layout.used_bytes(kind, kind == plan::ScheduleKind::kSequenceRuns ? r.num_runs : r.num_tiles);
  if (m.cuda()) {
    cuda_rt::memcpy_async(m.device_ws, block, used, c.device.index, stream);
    cuda_rt::event_record(m.events[half], stream);
  } else {
    std::memcpy(m.device_ws, block, used);
  }

  m.next_half = half ^ 1;
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
  info.kernel_arch = m.choice.arch;
  info.visible_pairs = r.visible_pairs;
}

void RaggedPrefill::run(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView* lse, Stream stream) const {
  const Impl& m = *impl_;
  const PrefillConfig& c = m.config;
  if (!m.planned) throw Error(ErrorKind::kInvalidArgument, "plan", "run() called before plan()");
  plan::TensorRules rules;
  rules.out_matches_input_dtype = true;
  rules.allow_fp32_fp64_inputs = false;
  rules.need_16B_alignment = m.cuda();
  rules.config = &c;  // tensors vs the config first: errors then name the config field
  plan::validate_prefill_tensors(q, k, v, out, lse, m.totals, rules);

  const auto* block = static_cast<const uint8_t*>(m.device_ws);
  if (!m.cuda()) {
    plan::ScheduleHeader h;
    std::memcpy(&h, block, sizeof(h));
    cpu::run_prefill(h, reinterpret_cast<const int32_t*>(block + m.layout.qo_indptr_offset),
                     reinterpret_cast<const int32_t*>(block + m.layout.kv_indptr_offset),
                     reinterpret_cast<const plan::WorkTile*>(block + m.layout.tiles_offset), q, k, v,
                     out, lse);
    return;
  }
  cuda::PrefillArgs a{};
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.out = out.data;
  a.lse = lse ? static_cast<float*>(lse->data) : nullptr;
  a.q_stride_tok = q.strides[0];
  a.q_stride_head = q.strides[1];
  a.k_stride_tok = k.strides[0];
  a.k_stride_head = k.strides[1];
  a.v_stride_tok = v.strides[0];
  a.v_stride_head = v.strides[1];
  a.o_stride_tok = out.strides[0];
  a.o_stride_head = out.strides[1];
  a.lse_stride_tok = lse ? lse->strides[0] : 0;
  a.lse_stride_head = lse ? lse->strides[1] : 0;
  a.k_rope = nullptr;  // plain K: every column from k
  a.k_rope_dim = 0;
  // Capacity-sized buffers may hold more rows than the plan's totals; the kernels may read up
  // to these bounds (never past them), so each is the smaller of the two tensors sharing it.
  a.q_rows = std::min(q.shape[0], out.shape[0]);
  a.kv_rows = std::min(k.shape[0], v.shape[0]);
  a.num_qo_heads = c.num_qo_heads;
  a.num_kv_heads = c.num_kv_heads;
  a.schedule = m.device_ws;
  a.scratch = m.choice.scratch_bytes > 0 ? static_cast<uint8_t*>(m.device_ws) + m.layout.total_bytes : nullptr;
  a.qo_indptr_offset = static_cast<int64_t>(m.layout.qo_indptr_offset);
  a.kv_indptr_offset = static_cast<int64_t>(m.layout.kv_indptr_offset);
  a.tiles_offset = static_cast<int64_t>(m.layout.tiles_offset);
  cuda::launch_prefill(m.choice, c.head_dim_qk, c.head_dim_vo, c.dtype, a, stream);
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
  c.max_batch = std::max(batch_size, 1);
  c.max_q_tokens = std::max<int64_t>(totals.total_q, 1);
  c.max_kv_tokens = std::max<int64_t>(totals.total_kv, 1);
  c.device = q.device;
  RaggedPrefill p(c);
  p.plan(qo_indptr_host, kv_indptr_host, batch_size, options, stream);
  p.run(q, k, v, out, lse, stream);
}

}  // namespace mlakit
