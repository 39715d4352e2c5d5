// mlakit-bench: times mlakit::RaggedPrefill on named or custom workloads, checks every result
// against the float64 reference on sampled rows, and reports ms, TFLOP/s, % of peak and plan()
// cost. Plain C++ on the public API (include/mlakit/*.h) only. `mlakit-bench --help` for usage.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <climits>
#include <chrono>
#include <ctime>
#include <functional>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_check.h"
#include "bench_json.h"
#include "bench_latent_plan.h"
#include "bench_seed.h"
#include "bench_source_digest.h"
#include "bench_timer.h"
#include "bench_workloads.h"
#include "mlakit/mlakit.h"

namespace mb = mlakit_bench;
using mlakit::Device;
using mlakit::DType;
using mlakit::TensorView;

namespace {

const char* kUsage = R"(usage: mlakit-bench [options]
       mlakit-bench seed [options]   the seed's serving workload through the MLA step (seed --help)

Workloads (default: all named workloads):
  --workload NAME     a named workload (repeatable); --list shows them
  --all               every named workload
  --lens L[,L...]     a custom workload: q lengths, "NxL" repeats L N times (e.g. 8x999,200)
  --kv-lens L[,...]   kv lengths of the custom workload (default: = --lens)
  --heads H --kv-heads Hkv --dqk D --dvo D --dtype bf16|fp16|e4m3
                      e4m3: FP8 inputs (bf16 output) with descale factors [batch, Hkv] of 1
                      (FlashAttention-3's arguments); --peak-tflops is then best given the FP8
                      ceiling (bench/compare.py --dtype e4m3 measures it)
  --causal | --no-causal   --window N (sliding window, keys to the left)   --soft-cap C
                      These set the custom workload; given explicitly they also override the
                      named workloads (the name then shows the override; with --lens, a note says so).
Device and scaling:
  --device cpu|cuda|auto   (default auto: cuda if a CUDA device is usable, else cpu)
  --kernel auto|sm80|sm90  CUDA kernel (default auto: sm90 on compute capability 9.0)
  --kv-split auto|on|off   key-range splitting (sm90; default auto: the tail rule only; on:
                      also small sequences; off: never; docs/api.md)
  --full              on the CPU backend, run named workloads at full size (default: every
                      length divided by --cpu-scale, 16 unless given)
  --cpu-scale N       divisor for named workloads on the CPU backend
Timing and checks:
  --iters N           timed samples (default 20 on cuda, 3 on cpu)
  --warmup N          warm-up launches (default 5 on cuda, 0 on cpu: the checked first run warms up)
  --warmup-ms X       then keep warming up until X ms have passed (default 0); e.g. 200 puts every
                      sample of a long workload under the GPU's power cap, which a few launches of
                      a 4 ms workload do not reach (docs/performance.md)
  --rotate N          input sets rotated between launches (default on cuda: enough to exceed
                      2 x 60 MB L2, at most 32 and 8 GiB; on cpu: 1)
  --plan-iters N      plan() calls timed per workload (default 200)
  --gap-ms X          probes of the state a launch starts from, outside the timed samples: sleep
  --l2-flush-mb N     X ms on the host / write an N MiB device buffer (evicting L2) before each
                      sample; the JSON lists every sample's time ("sample_ms")
  --no-check          skip the reference check
  --check-samples N   random (row, head) pairs checked (default 256; plus first/last rows)
  --tol X             relative tolerance (default 1e-2 bf16, 2e-3 fp16)
  --seed N            input seed (default 1234)
  --peak-tflops X     peak for "% peak" (default 774 = cuBLAS bf16 8192^3 measured on H200)
Modes and output:
  --plan-only         only host costs of plan() and run() at batch 1, 8, 100 (999 tokens each),
                      and LatentAttention::plan() at batch 128 (decode, ragged, MTP; 16/128 heads)
  --json PATH         write all results as JSON
  --list              list the named workloads and exit
  --list-json         the same with every length, as JSON (bench/workloads.py reads bench/workloads.txt alike)
Exit code: 0 all checks passed; 1 a check failed or a workload errored; 2 bad usage.
)";

struct Args {
  std::vector<std::string> workloads;
  bool all = false;
  std::string lens, kv_lens;
  int heads = 16, kv_heads = -1, dqk = 192, dvo = 128;
  DType dtype = DType::kBF16;
  bool causal = true;
  int window = -1;
  float soft_cap = 0.0f;
  // Which shape/mask options were given explicitly (they override named workloads).
  bool set_heads = false, set_kv_heads = false, set_dqk = false, set_dvo = false,
       set_dtype = false, set_causal = false, set_window = false, set_soft_cap = false;
  std::string device = "auto";
  mlakit::KernelPreference kernel = mlakit::KernelPreference::kAuto;
  mlakit::KvSplitMode kv_split = mlakit::KvSplitMode::kAuto;
  bool full = false;
  int cpu_scale = 16;
  int iters = -1, warmup = -1, rotate = -1, plan_iters = 200;
  double gap_ms = 0.0;  // host sleep before each timed sample (outside it)
  double warmup_ms = 0.0;  // keep warming up until this much wall time has passed
  int l2_flush_mb = 0;  // device buffer written before each timed sample (outside it)
  bool check = true;
  int check_samples = 256;
  double tol = -1.0;
  uint64_t seed = 1234;
  double peak_tflops = 774.0;
  bool plan_only = false, list = false, list_json = false;
  std::string json_path;
  std::string command_line;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "mlakit-bench: %s\n(see --help)\n", msg.c_str());
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 0; i < argc; ++i) a.command_line += (i ? " " : "") + std::string(argv[i]);
  auto need = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage_error(std::string("missing value after ") + argv[i]);
    return argv[++i];
  };
  // An integer >= `min`; anything else is a usage error (never silently clamped).
  auto to_int = [](const std::string& s, const char* what, long min = LONG_MIN) {
    long v = 0;
    try {
      size_t used = 0;
      v = std::stol(s, &used);
      if (used != s.size()) throw std::invalid_argument(s);
    } catch (const std::exception&) {
      usage_error(std::string("bad integer for ") + what + ": '" + s + "'");
    }
    if (v < min || v > INT_MAX) {
      usage_error(std::string(what) + " must be an integer >= " + std::to_string(min) + ", got " + s);
    }
    return static_cast<int>(v);
  };
  // A number, in [lo, hi] when bounds are given; anything else is a usage error.
  auto to_double = [](const std::string& s, const char* what, double lo = -HUGE_VAL, double hi = HUGE_VAL) {
    double v = 0.0;
    try {
      size_t used = 0;
      v = std::stod(s, &used);
      if (used != s.size()) throw std::invalid_argument(s);
    } catch (const std::exception&) {
      usage_error(std::string("bad number for ") + what + ": " + s);
    }
    if (!(v >= lo && v <= hi)) {
      char range[64];
      std::snprintf(range, sizeof range, " must be between %g and %g", lo, hi);
      usage_error(std::string(what) + range);
    }
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    if (o == "--help" || o == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (o == "--workload") a.workloads.push_back(need(i));
    else if (o == "--all") a.all = true;
    else if (o == "--lens") a.lens = need(i);
    else if (o == "--kv-lens") a.kv_lens = need(i);
    else if (o == "--heads") { a.heads = to_int(need(i), "--heads", 1); a.set_heads = true; }
    else if (o == "--kv-heads") { a.kv_heads = to_int(need(i), "--kv-heads", 1); a.set_kv_heads = true; }
    else if (o == "--dqk") { a.dqk = to_int(need(i), "--dqk", 1); a.set_dqk = true; }
    else if (o == "--dvo") { a.dvo = to_int(need(i), "--dvo", 1); a.set_dvo = true; }
    else if (o == "--dtype") {
      const std::string d = need(i);
      if (d == "bf16") a.dtype = DType::kBF16;
      else if (d == "fp16") a.dtype = DType::kFP16;
      else if (d == "e4m3") a.dtype = DType::kE4M3;
      else usage_error("--dtype must be bf16, fp16 or e4m3, got " + d);
      a.set_dtype = true;
    } else if (o == "--causal") { a.causal = true; a.set_causal = true; }
    else if (o == "--no-causal") { a.causal = false; a.set_causal = true; }
    else if (o == "--window") { a.window = to_int(need(i), "--window", -1); a.set_window = true; }
    else if (o == "--soft-cap") {
      a.soft_cap = static_cast<float>(to_double(need(i), "--soft-cap"));
      a.set_soft_cap = true;
    } else if (o == "--device") a.device = need(i);
    else if (o == "--kernel") {
      const std::string k = need(i);
      if (k == "auto") a.kernel = mlakit::KernelPreference::kAuto;
      else if (k == "sm80") a.kernel = mlakit::KernelPreference::kSm80;
      else if (k == "sm90") a.kernel = mlakit::KernelPreference::kSm90;
      else usage_error("--kernel must be auto, sm80 or sm90");
    }
    else if (o == "--kv-split") {
      const std::string k = need(i);
      if (k == "auto") a.kv_split = mlakit::KvSplitMode::kAuto;
      else if (k == "on") a.kv_split = mlakit::KvSplitMode::kOn;
      else if (k == "off") a.kv_split = mlakit::KvSplitMode::kOff;
      else usage_error("--kv-split must be auto, on or off");
    }
    else if (o == "--full") a.full = true;
    else if (o == "--cpu-scale") a.cpu_scale = to_int(need(i), "--cpu-scale", 1);
    else if (o == "--iters") a.iters = to_int(need(i), "--iters", 1);
    else if (o == "--warmup") a.warmup = to_int(need(i), "--warmup", 0);
    else if (o == "--warmup-ms") a.warmup_ms = to_double(need(i), "--warmup-ms", 0.0, 60000.0);
    else if (o == "--rotate") a.rotate = to_int(need(i), "--rotate", 1);
    else if (o == "--gap-ms") a.gap_ms = to_double(need(i), "--gap-ms", 0.0, 10000.0);
    else if (o == "--l2-flush-mb") a.l2_flush_mb = to_int(need(i), "--l2-flush-mb", 0);
    else if (o == "--plan-iters") a.plan_iters = to_int(need(i), "--plan-iters", 1);
    else if (o == "--no-check") a.check = false;
    else if (o == "--check-samples") a.check_samples = to_int(need(i), "--check-samples", 0);
    else if (o == "--tol") a.tol = to_double(need(i), "--tol");
    else if (o == "--seed") a.seed = static_cast<uint64_t>(to_int(need(i), "--seed", 0));
    else if (o == "--peak-tflops") a.peak_tflops = to_double(need(i), "--peak-tflops");
    else if (o == "--plan-only") a.plan_only = true;
    else if (o == "--json") a.json_path = need(i);
    else if (o == "--list") a.list = true;
    else if (o == "--list-json") a.list_json = true;
    else usage_error("unknown option " + o);
  }
  if (a.device != "auto" && a.device != "cpu" && a.device != "cuda")
    usage_error("--device must be cpu, cuda or auto");
  if (a.set_kv_heads && a.heads % a.kv_heads != 0)
    usage_error("--heads " + std::to_string(a.heads) + " must be a multiple of --kv-heads " +
                std::to_string(a.kv_heads));
  if (a.tol != -1.0 && !(a.tol > 0.0)) usage_error("--tol must be > 0");
  if (a.set_soft_cap && !(a.soft_cap >= 0.0f)) usage_error("--soft-cap must be >= 0");
  return a;
}

// ---------------------------------------------------------------------------------------------
// Owned device memory (RAII over mlakit::device_alloc).
struct Buffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device dev;
  Buffer(size_t n, Device d) : bytes(n), dev(d) { ptr = mlakit::device_alloc(std::max<size_t>(n, 256), d); }
  ~Buffer() { if (ptr) mlakit::device_free(ptr, dev); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

struct InputSet {
  std::unique_ptr<Buffer> q, k, v, out;
};

// The output's dtype: the inputs', bf16 for e4m3 inputs.
DType out_dtype_of(DType in) { return in == DType::kE4M3 ? DType::kBF16 : in; }

struct Result {
  mb::Workload w;
  std::string device;
  bool ok = false;       // ran without error
  std::string error;
  mlakit::PlanInfo info;
  double gflop = 0.0;
  mb::TimingResult timing;
  double tflops = 0.0, pct_peak = 0.0;
  double plan_us = 0.0;
  int rotate = 1;
  bool checked = false;
  mb::CheckResult check;        // first run (poisoned output, with lse)
  mb::CheckResult check_after;  // last timed run's output
  double tolerance = 0.0;
};

std::string display_name(const mb::Workload& w) { return w.name; }

// Applies the explicitly given shape/mask options to a named workload.
mb::Workload apply_overrides(mb::Workload w, const Args& a) {
  std::string tag;
  auto add = [&](const std::string& t) { tag += (tag.empty() ? "" : ",") + t; };
  if (a.set_heads) { w.heads = a.heads; if (!a.set_kv_heads) w.kv_heads = a.heads; add("H" + std::to_string(a.heads)); }
  if (a.set_kv_heads) { w.kv_heads = a.kv_heads; add("Hkv" + std::to_string(a.kv_heads)); }
  if (a.set_dqk) { w.dqk = a.dqk; add("dqk" + std::to_string(a.dqk)); }
  if (a.set_dvo) { w.dvo = a.dvo; add("dvo" + std::to_string(a.dvo)); }
  if (a.set_dtype) { w.dtype = a.dtype; add(mlakit::dtype_name(a.dtype)); }
  if (a.set_causal) { w.options.causal = a.causal; add(a.causal ? "causal" : "noncausal"); }
  if (a.set_window) { w.options.window_left = a.window; add("w" + std::to_string(a.window)); }
  if (a.set_soft_cap) { w.options.logits_soft_cap = a.soft_cap; add("cap" + mb::json_num(a.soft_cap)); }
  if (!tag.empty()) w.name += "[" + tag + "]";
  return w;
}

std::vector<mb::Workload> build_workloads(const Args& a, bool cpu) {
  std::vector<mb::Workload> list;
  std::vector<std::string> names = a.workloads;
  if (a.all || (names.empty() && a.lens.empty()))
    for (const auto& w : mb::named_workloads()) names.push_back(w.name);
  std::string overridden;  // the first named workload the shape/mask options changed
  for (const std::string& n : names) {
    mb::Workload w;
    if (!mb::find_named(n, &w)) usage_error("unknown workload '" + n + "' (--list shows them)");
    w = apply_overrides(w, a);
    if (overridden.empty() && w.name != n) overridden = w.name;
    if (cpu && !a.full) w = mb::scaled(w, a.cpu_scale);
    list.push_back(w);
  }
  if (!a.lens.empty()) {
    mb::Workload w;
    w.name = "custom";
    try {
      w.q_lens = mb::parse_lens(a.lens);
      w.kv_lens = a.kv_lens.empty() ? w.q_lens : mb::parse_lens(a.kv_lens);
    } catch (const std::exception& e) {
      usage_error(std::string("--lens/--kv-lens: ") + e.what());
    }
    if (w.kv_lens.size() != w.q_lens.size()) usage_error("--kv-lens needs as many lengths as --lens");
    w.heads = a.heads;
    w.kv_heads = a.kv_heads > 0 ? a.kv_heads : a.heads;
    w.dqk = a.dqk;
    w.dvo = a.dvo;
    w.dtype = a.dtype;
    w.options.causal = a.causal;
    w.options.window_left = a.window;
    w.options.logits_soft_cap = a.soft_cap;
    list.push_back(w);
  }
  // Shape/mask options meant for the --lens workload change the named ones too (documented, but
  // easy to miss in an A/B script that mixes both): say so once.
  if (!overridden.empty() && !a.lens.empty())
    std::fprintf(stderr,
                 "note: the shape/mask options given for --lens also apply to the named workloads "
                 "(e.g. %s); run the named workloads without them to keep their own shapes\n",
                 overridden.c_str());
  return list;
}

mlakit::PrefillConfig config_for(const mb::Workload& w, Device dev, mlakit::KernelPreference kernel,
                                 mlakit::KvSplitMode kv_split) {
  mlakit::PrefillConfig c;
  c.num_qo_heads = w.heads;
  c.num_kv_heads = w.kv_heads;
  c.head_dim_qk = w.dqk;
  c.head_dim_vo = w.dvo;
  c.dtype = w.dtype;
  c.out_dtype = out_dtype_of(w.dtype);
  c.max_batch = std::max(1, w.batch());
  c.max_q_tokens = std::max<int64_t>(1, w.total_q());
  c.max_kv_tokens = std::max<int64_t>(1, w.total_kv());
  c.device = dev;
  c.kernel = kernel;
  c.kv_split = kv_split;
  return c;
}

int default_rotation(const mb::Workload& w, Device dev) {
  if (!dev.is_cuda()) return 1;
  const double l2 = 60e6, budget = 8.0 * (1ull << 30);
  const double per = static_cast<double>(std::max<size_t>(w.bytes_per_set(), 1));
  int n = static_cast<int>(std::ceil(2.0 * l2 / per));
  n = std::min(n, 32);
  n = std::min(n, static_cast<int>(budget / per));
  return std::max(n, 1);
}

Result run_workload(const mb::Workload& w, Device dev, const Args& a) {
  Result r;
  r.w = w;
  r.device = mlakit::to_string(dev);
  r.tolerance = a.tol > 0 ? a.tol : mb::default_tolerance(w.dtype);
  try {
    const mlakit::PrefillConfig cfg = config_for(w, dev, a.kernel, a.kv_split);
    mlakit::RaggedPrefill prefill(cfg);
    const std::vector<int32_t> qo = w.qo_indptr(), kv = w.kv_indptr();
    prefill.plan(qo.data(), kv.data(), w.batch(), w.options);
    r.info = prefill.info();
    if (r.info.kernel_arch > 0) r.device += "/sm" + std::to_string(r.info.kernel_arch);
    if (r.info.split_slots > 0) r.device += "+split";
    r.gflop = 2.0 * (w.dqk + w.dvo) * static_cast<double>(r.info.visible_pairs) * w.heads / 1e9;

    // Host inputs (fixed seed; each tensor its own stream of numbers).
    const int64_t tq = w.total_q(), tk = w.total_kv();
    const size_t nq = static_cast<size_t>(tq) * w.heads * w.dqk;
    const size_t nk = static_cast<size_t>(tk) * w.kv_heads * w.dqk;
    const size_t nv = static_cast<size_t>(tk) * w.kv_heads * w.dvo;
    const size_t no = static_cast<size_t>(tq) * w.heads * w.dvo;
    const size_t es = mlakit::dtype_size(w.dtype);
    const DType od = out_dtype_of(w.dtype);
    const size_t oes = mlakit::dtype_size(od);
    const std::vector<uint8_t> hq = mb::random_normal_bytes(nq, a.seed * 3 + 0, w.dtype);
    const std::vector<uint8_t> hk = mb::random_normal_bytes(nk, a.seed * 3 + 1, w.dtype);
    const std::vector<uint8_t> hv = mb::random_normal_bytes(nv, a.seed * 3 + 2, w.dtype);
    // e4m3: descale factors of 1 in device buffers, so the timed kernel reads them as an engine's
    // would (FlashAttention-3's q_descale / k_descale / v_descale).
    const bool fp8 = w.dtype == DType::kE4M3;
    std::unique_ptr<Buffer> descale;
    TensorView descale_view;
    mlakit::Descales descales;
    if (fp8) {
      const std::vector<float> ones(static_cast<size_t>(std::max(1, w.batch())) * w.kv_heads, 1.0f);
      descale = std::make_unique<Buffer>(ones.size() * sizeof(float), dev);
      mlakit::copy_bytes(descale->ptr, dev, ones.data(), Device::cpu(), ones.size() * sizeof(float));
      descale_view = TensorView(descale->ptr, DType::kFP32, {std::max(1, w.batch()), w.kv_heads}, dev);
      descales = mlakit::Descales{&descale_view, &descale_view, &descale_view};
    }

    // Rotation sets: copies of the same inputs at distinct addresses, so repeated launches do
    // not find their inputs in L2. Outputs are poisoned (0xFF = NaN in bf16/fp16/fp32).
    r.rotate = a.rotate > 0 ? a.rotate : default_rotation(w, dev);
    std::vector<InputSet> sets(static_cast<size_t>(r.rotate));
    for (InputSet& s : sets) {
      s.q = std::make_unique<Buffer>(nq * es, dev);
      s.k = std::make_unique<Buffer>(nk * es, dev);
      s.v = std::make_unique<Buffer>(nv * es, dev);
      s.out = std::make_unique<Buffer>(no * oes, dev);
      mlakit::copy_bytes(s.q->ptr, dev, hq.data(), Device::cpu(), nq * es);
      mlakit::copy_bytes(s.k->ptr, dev, hk.data(), Device::cpu(), nk * es);
      mlakit::copy_bytes(s.v->ptr, dev, hv.data(), Device::cpu(), nv * es);
      mlakit::fill_bytes(s.out->ptr, dev, 0xFF, no * oes);
    }
    Buffer lse(static_cast<size_t>(tq) * w.heads * sizeof(float), dev);
    mlakit::fill_bytes(lse.ptr, dev, 0xFF, lse.bytes);
    mlakit::synchronize(dev);

    auto views = [&](const InputSet& s, TensorView* q, TensorView* k, TensorView* v, TensorView* o) {
      *q = TensorView(s.q->ptr, w.dtype, {tq, w.heads, w.dqk}, dev);
      *k = TensorView(s.k->ptr, w.dtype, {tk, w.kv_heads, w.dqk}, dev);
      *v = TensorView(s.v->ptr, w.dtype, {tk, w.kv_heads, w.dvo}, dev);
      *o = TensorView(s.out->ptr, od, {tq, w.heads, w.dvo}, dev);
    };

    // Reference rows, computed once (all sets hold the same inputs).
    mb::Reference ref;
    if (a.check) {
      TensorView q(const_cast<uint8_t*>(hq.data()), w.dtype, {tq, w.heads, w.dqk});
      TensorView k(const_cast<uint8_t*>(hk.data()), w.dtype, {tk, w.kv_heads, w.dqk});
      TensorView v(const_cast<uint8_t*>(hv.data()), w.dtype, {tk, w.kv_heads, w.dvo});
      ref = mb::compute_reference(w, q, k, v, mb::sample_pairs(w, a.check_samples, a.seed + 7));
    }
    std::vector<uint16_t> out_host(no);
    std::vector<float> lse_host(static_cast<size_t>(tq) * w.heads);

    // First run: into the poisoned set 0, with lse.
    {
      TensorView q, k, v, o;
      views(sets[0], &q, &k, &v, &o);
      TensorView l(lse.ptr, DType::kFP32, {tq, w.heads}, dev);
      prefill.run(q, k, v, o, &l, descales);
      mlakit::synchronize(dev);
      if (a.check) {
        mlakit::copy_bytes(out_host.data(), Device::cpu(), sets[0].out->ptr, dev, no * oes);
        mlakit::copy_bytes(lse_host.data(), Device::cpu(), lse.ptr, dev, lse.bytes);
        mlakit::synchronize(dev);
        r.check = mb::compare_to_reference(w, ref, out_host.data(), lse_host.data(), r.tolerance, 1e-3);
      }
    }

    // Timed runs, rotating sets.
    std::vector<TensorView> tv(sets.size() * 4);
    for (size_t i = 0; i < sets.size(); ++i) views(sets[i], &tv[4 * i], &tv[4 * i + 1], &tv[4 * i + 2], &tv[4 * i + 3]);
    int last = 0;
    const int warmup = a.warmup >= 0 ? a.warmup : (dev.is_cuda() ? 5 : 0);  // on cpu the checked first run warms up
    const int iters = a.iters > 0 ? a.iters : (dev.is_cuda() ? 20 : 3);
    std::unique_ptr<Buffer> flush;
    if (a.l2_flush_mb > 0) flush = std::make_unique<Buffer>(static_cast<size_t>(a.l2_flush_mb) << 20, dev);
    std::function<void()> between;
    if (a.gap_ms > 0 || flush) {
      between = [&] {
        if (flush) mlakit::fill_bytes(flush->ptr, dev, 0x5a, flush->bytes);
        if (a.gap_ms > 0) {
          mlakit::synchronize(dev);
          std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(a.gap_ms));
        }
      };
    }
    r.timing = mb::time_launches(
        dev, nullptr, warmup, iters,
        [&](int i) {
          last = i % static_cast<int>(sets.size());
          const size_t b = 4 * static_cast<size_t>(last);
          prefill.run(tv[b], tv[b + 1], tv[b + 2], tv[b + 3], nullptr, descales);
        },
        between, a.warmup_ms);
    r.tflops = r.timing.median_ms > 0 ? r.gflop / r.timing.median_ms : 0.0;  // GFLOP/ms = TFLOP/s
    r.pct_peak = a.peak_tflops > 0 ? 100.0 * r.tflops / a.peak_tflops : 0.0;

    // The last timed run's output must match too (catches races between repeated launches).
    if (a.check) {
      mlakit::copy_bytes(out_host.data(), Device::cpu(), sets[static_cast<size_t>(last)].out->ptr, dev, no * oes);
      mlakit::synchronize(dev);
      r.check_after = mb::compare_to_reference(w, ref, out_host.data(), nullptr, r.tolerance, 0.0);
      r.checked = true;
    }

    // plan() host cost for this batch.
    r.plan_us = mb::median_host_us(
        a.plan_iters, [&] { prefill.plan(qo.data(), kv.data(), w.batch(), w.options); },
        [&] { mlakit::synchronize(dev); });
    mlakit::synchronize(dev);
    r.ok = true;
  } catch (const mlakit::Error& e) {
    r.error = e.what();
  } catch (const std::exception& e) {
    r.error = std::string("error: ") + e.what();
  }
  return r;
}

bool result_passed(const Result& r) {
  return r.ok && (!r.checked || (r.check.pass && r.check_after.pass));
}

std::string check_text(const Result& r) {
  if (!r.ok) return "ERROR";
  if (!r.checked) return "skipped";
  char buf[64];
  const double e = std::max(r.check.max_relerr, r.check_after.max_relerr);
  std::snprintf(buf, sizeof buf, "%s %.1e", result_passed(r) ? "PASS" : "FAIL", e);
  return buf;
}

std::string throughput_text(const Result& r, bool cuda) {
  char buf[64];
  if (cuda) std::snprintf(buf, sizeof buf, "%.1f", r.tflops);
  else std::snprintf(buf, sizeof buf, "%.2f GF/s", r.tflops * 1e3);
  return buf;
}

void print_table(const std::vector<Result>& results, bool cuda, double peak) {
  std::printf("\n%-26s %-12s %4s %13s %9s %11s %7s %9s %-9s %s\n", "workload", "device", "B",
              "tokens q/kv", "ms", cuda ? "TFLOP/s" : "GFLOP/s", "%peak", "plan us", "scale",
              "check (max rel err)");
  for (const Result& r : results) {
    char tokens[48], scale[24];
    std::snprintf(tokens, sizeof tokens, "%lld/%lld", static_cast<long long>(r.w.total_q()),
                  static_cast<long long>(r.w.total_kv()));
    if (r.w.scale_divisor > 1) std::snprintf(scale, sizeof scale, "1/%d cpu", r.w.scale_divisor);
    else std::snprintf(scale, sizeof scale, "full");
    if (!r.ok) {
      std::printf("%-26s %-12s %4d %13s %9s %11s %7s %9s %-9s %s\n", r.w.name.c_str(), r.device.c_str(),
                  r.w.batch(), tokens, "-", "-", "-", "-", scale, "ERROR");
      std::printf("    %s\n", r.error.c_str());
      continue;
    }
    char pct[16];
    if (cuda) std::snprintf(pct, sizeof pct, "%.1f%%", r.pct_peak);
    else std::snprintf(pct, sizeof pct, "n/a");
    std::string tp = throughput_text(r, cuda);
    if (!cuda) tp = tp.substr(0, tp.find(' '));
    std::printf("%-26s %-12s %4d %13s %9.3f %11s %7s %9.1f %-9s %s\n", r.w.name.c_str(), r.device.c_str(),
                r.w.batch(), tokens, r.timing.median_ms, tp.c_str(), pct, r.plan_us, scale,
                check_text(r).c_str());
    if (r.checked && !result_passed(r)) {
      const std::string& d = r.check.pass ? r.check_after.detail : r.check.detail;
      std::printf("    check failed%s: %s\n", r.check.pass ? " after repeated runs" : "", d.c_str());
    }
  }
  bool any_scaled = false;
  for (const Result& r : results) any_scaled |= r.w.scale_divisor > 1;
  if (any_scaled)
    std::printf("note: named workloads scaled for CPU (every length divided as shown in 'scale'); "
                "--full runs them at full size\n");
  if (cuda) std::printf("%%peak is of %.0f TFLOP/s (--peak-tflops)\n", peak);
  std::printf("FLOPs = 2*(Dqk+Dvo)*visible_pairs*H; ms = median per launch\n");
}

std::string git_commit() {
  if (const char* e = std::getenv("MLAKIT_GIT_COMMIT")) if (*e) return e;
  // Try the source tree this file was compiled from, then the working directory.
  std::string dir = __FILE__;
  dir = dir.substr(0, dir.find_last_of('/') == std::string::npos ? 0 : dir.find_last_of('/'));
  const std::string cmds[] = {
      "git -C '" + (dir.empty() ? std::string(".") : dir) + "' rev-parse HEAD 2>/dev/null",
      "git rev-parse HEAD 2>/dev/null"};
  for (const std::string& c : cmds) {
    FILE* p = popen(c.c_str(), "r");
    if (!p) continue;
    char buf[128] = {0};
    const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
    pclose(p);
    std::string s = got ? std::string(buf) : "";
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (s.size() >= 7) return s;
  }
  return "unknown";
}

std::string result_json(const Result& r) {
  mb::JsonObject o;
  const mb::Workload& w = r.w;
  o.str("workload", w.name).str("device", r.device).num("batch", w.batch()).num("heads", w.heads)
      .num("kv_heads", w.kv_heads).num("dqk", w.dqk).num("dvo", w.dvo)
      .str("dtype", mlakit::dtype_name(w.dtype)).boolean("causal", w.options.causal)
      .num("window_left", w.options.window_left).num("soft_cap", w.options.logits_soft_cap)
      .num("scale_divisor", w.scale_divisor).array("q_lens", w.q_lens).array("kv_lens", w.kv_lens)
      .num("tokens_q", static_cast<double>(w.total_q()))
      .num("tokens_kv", static_cast<double>(w.total_kv()));
  o.boolean("ok", r.ok);
  if (!r.ok) {
    o.str("error", r.error);
    o.boolean("pass", false);
    return o.dump(4);
  }
  o.num("visible_pairs", static_cast<double>(r.info.visible_pairs)).num("gflop", r.gflop)
      .num("ms", r.timing.median_ms).num("ms_min", r.timing.min_ms).num("ms_mean", r.timing.mean_ms)
      .num("samples", r.timing.samples).num("launches_per_sample", r.timing.launches_per_sample)
      .array("sample_ms", r.timing.sample_ms).num("warmup_launches", r.timing.warmup_launches)
      .str("timing_method", r.timing.method).num("rotate", r.rotate)
      .num("tflops", r.tflops).num("pct_peak", r.pct_peak).num("plan_us", r.plan_us)
      .num("plan_num_tiles", r.info.num_tiles).num("plan_block_m", r.info.block_m)
      .num("plan_block_n", r.info.block_n).num("plan_grid_blocks", r.info.grid_blocks)
      .num("kernel_arch", r.info.kernel_arch)
      .num("split_slots", r.info.split_slots);
  o.boolean("checked", r.checked);
  if (r.checked) {
    o.num("relerr", std::max(r.check.max_relerr, r.check_after.max_relerr))
        .num("lse_abs_err", r.check.max_lse_err).num("check_pairs", r.check.pairs)
        .num("tolerance", r.tolerance)
        .str("check_detail", r.check.pass ? r.check_after.detail : r.check.detail);
  }
  o.boolean("pass", result_passed(r));
  return o.dump(4);
}

struct PlanOnlyRow {
  int batch = 0;
  double median_us = 0.0;
  double run_median_us = 0.0;  // host cost of one run() call: validation + kernel enqueue
  std::string error;
};

// Device buffers for one workload's q/k/v/out, for timing host-side costs only (contents are
// arbitrary non-zero bytes; no result is checked).
struct ScratchTensors {
  Device dev;
  std::vector<void*> ptrs;
  mlakit::TensorView q, k, v, out;
  ScratchTensors(const mb::Workload& w, Device d) : dev(d) {
    auto make = [&](int64_t n, int64_t h, int64_t dim) {
      const size_t bytes = static_cast<size_t>(n * h * dim) * 2;
      void* p = mlakit::device_alloc(bytes > 0 ? bytes : 16, d);
      mlakit::fill_bytes(p, d, 0x3c, bytes);
      ptrs.push_back(p);
      return mlakit::TensorView(p, w.dtype, {n, h, dim}, d);
    };
    q = make(w.total_q(), w.heads, w.dqk);
    k = make(w.total_kv(), w.kv_heads, w.dqk);
    v = make(w.total_kv(), w.kv_heads, w.dvo);
    out = make(w.total_q(), w.heads, w.dvo);
    mlakit::synchronize(d);
  }
  ~ScratchTensors() {
    mlakit::synchronize(dev);
    for (void* p : ptrs) mlakit::device_free(p, dev);
  }
};

std::vector<PlanOnlyRow> run_plan_only(Device dev, const Args& a) {
  std::vector<PlanOnlyRow> rows;
  const int iters = std::max(a.plan_iters, 1000);
  std::printf("\nplan() host cost, 999 tokens per sequence, causal, H=16 (192,128) bf16, %s, "
              "median of %d calls\n", mlakit::to_string(dev).c_str(), iters);
  std::printf("%6s %12s %12s\n", "batch", "plan us", "run us");
  for (int b : {1, 8, 100}) {
    PlanOnlyRow row;
    row.batch = b;
    try {
      mb::Workload w;
      w.name = "plan";
      w.q_lens.assign(static_cast<size_t>(b), 999);
      w.kv_lens = w.q_lens;
      w.options.causal = true;
      mlakit::RaggedPrefill p(config_for(w, dev, a.kernel, a.kv_split));
      const std::vector<int32_t> qo = w.qo_indptr(), kv = w.kv_indptr();
      for (int i = 0; i < 10; ++i) p.plan(qo.data(), kv.data(), b, w.options);  // warm-up
      mlakit::synchronize(dev);
      row.median_us = mb::median_host_us(iters, [&] { p.plan(qo.data(), kv.data(), b, w.options); },
                                         [&] { mlakit::synchronize(dev); });
      mlakit::synchronize(dev);
      // run(): host time to validate and enqueue (the kernel itself runs asynchronously). On
      // the CPU backend run() is the computation itself, so there is no overhead to isolate.
      if (dev.is_cuda()) {
        ScratchTensors t(w, dev);
        row.run_median_us = mb::median_host_us(200, [&] { p.run(t.q, t.k, t.v, t.out); },
                                               [&] { mlakit::synchronize(dev); });
        mlakit::synchronize(dev);
      }
      std::printf("%6d %12.2f %12.2f\n", b, row.median_us, row.run_median_us);
    } catch (const std::exception& e) {
      row.error = e.what();
      std::printf("%6d %12s  %s\n", b, "ERROR", row.error.c_str());
    }
    rows.push_back(row);
  }
  const PlanOnlyRow& last = rows.back();
  if (last.error.empty())
    std::printf("target < 20 us at batch 100: %s\n", last.median_us < 20.0 ? "met" : "MISSED");
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  // `mlakit-bench seed ...`: the seed's serving workload through the MLA step (bench_seed.h).
  if (argc > 1 && std::string(argv[1]) == "seed") return mb::run_seed(argc - 1, argv + 1);
  const Args a = parse_args(argc, argv);
  if (a.list_json) {
    // Every named workload with its lengths: what bench/workloads.py must read alike.
    std::printf("[");
    const auto all = mb::named_workloads();
    for (size_t i = 0; i < all.size(); ++i) {
      const mb::Workload& w = all[i];
      auto lens = [](const std::vector<int32_t>& v) {
        std::string s = "[";
        for (size_t j = 0; j < v.size(); ++j) s += (j ? ", " : "") + std::to_string(v[j]);
        return s + "]";
      };
      std::printf("%s\n {\"name\": \"%s\", \"q_lens\": %s, \"kv_lens\": %s, \"causal\": %s, \"heads\": %d, "
                  "\"kv_heads\": %d, \"dqk\": %d, \"dvo\": %d}",
                  i ? "," : "", w.name.c_str(), lens(w.q_lens).c_str(), lens(w.kv_lens).c_str(),
                  w.options.causal ? "true" : "false", w.heads, w.kv_heads, w.dqk, w.dvo);
    }
    std::printf("\n]\n");
    return 0;
  }
  if (a.list) {
    std::printf("%-22s %5s %6s %10s %10s %7s\n", "name", "B", "H", "tokens_q", "tokens_kv", "causal");
    for (const mb::Workload& w : mb::named_workloads())
      std::printf("%-22s %5d %6d %10lld %10lld %7s\n", w.name.c_str(), w.batch(), w.heads,
                  static_cast<long long>(w.total_q()), static_cast<long long>(w.total_kv()),
                  w.options.causal ? "yes" : "no");
    return 0;
  }

  // Device selection.
  Device dev = Device::cpu();
  const int ncuda = mlakit::cuda_device_count();
  if (a.device == "cuda") {
    if (ncuda == 0) {
      std::fprintf(stderr, "mlakit-bench: --device cuda but CUDA is unusable: %s\n",
                   mlakit::cuda_unavailable_reason().c_str());
      return 1;
    }
    dev = Device::cuda(0);
  } else if (a.device == "auto" && ncuda > 0) {
    dev = Device::cuda(0);
  }
  const std::string desc = mlakit::device_description(dev);
  if (a.device == "auto") {
    std::printf("device: auto -> %s (%s)%s%s\n", mlakit::to_string(dev).c_str(), desc.c_str(),
                dev.is_cpu() ? "; CUDA unusable: " : "",
                dev.is_cpu() ? mlakit::cuda_unavailable_reason().c_str() : "");
  } else {
    std::printf("device: %s (%s)\n", mlakit::to_string(dev).c_str(), desc.c_str());
  }

  std::vector<Result> results;
  std::vector<PlanOnlyRow> plan_rows;
  std::vector<mb::LatentPlanRow> latent_plan_rows;
  if (a.plan_only) {
    plan_rows = run_plan_only(dev, a);
    latent_plan_rows = mb::run_latent_plan_cost(dev, std::max(a.plan_iters, 1000));
  } else {
    const std::vector<mb::Workload> list = build_workloads(a, dev.is_cpu());
    bool any_scaled = false;
    for (const mb::Workload& w : list) any_scaled |= w.scale_divisor > 1;
    if (any_scaled)
      std::printf("CPU backend: named workloads scaled 1/%d (--full for full size)\n", a.cpu_scale);
    for (const mb::Workload& w : list) {
      std::printf("running %s ...\n", w.name.c_str());
      std::fflush(stdout);
      results.push_back(run_workload(w, dev, a));
    }
    print_table(results, dev.is_cuda(), a.peak_tflops);
  }

  bool all_ok = true;
  for (const Result& r : results) all_ok &= result_passed(r);
  for (const PlanOnlyRow& p : plan_rows) all_ok &= p.error.empty();
  for (const mb::LatentPlanRow& p : latent_plan_rows) all_ok &= p.error.empty();

  if (!a.json_path.empty()) {
    std::vector<std::string> rs;
    for (const Result& r : results) rs.push_back(result_json(r));
    std::vector<std::string> ps;
    for (const PlanOnlyRow& p : plan_rows) {
      mb::JsonObject o;
      o.num("batch", p.batch).num("tokens_per_seq", 999).num("plan_us", p.median_us).num("run_us", p.run_median_us);
      if (!p.error.empty()) o.str("error", p.error);
      ps.push_back(o.dump(4));
    }
    char when[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    mb::JsonObject top;
    top.str("tool", "mlakit-bench").str("device", mlakit::to_string(dev))
        .str("device_description", desc).boolean("built_with_cuda", mlakit::built_with_cuda())
        .str("git_commit", git_commit()).str("source_digest", mlakit_bench::source_digest())
        .str("command_line", a.command_line).str("time_utc", when)
        .num("peak_tflops", a.peak_tflops).boolean("all_passed", all_ok)
        .raw("results", mb::json_list(rs, 2)).raw("plan_only", mb::json_list(ps, 2))
        .raw("latent_plan", mb::json_list(mb::latent_plan_json(latent_plan_rows, 4), 2));
    std::ofstream f(a.json_path);
    f << top.dump() << "\n";
    if (!f) {
      std::fprintf(stderr, "mlakit-bench: could not write %s\n", a.json_path.c_str());
      return 1;
    }
    std::printf("wrote %s\n", a.json_path.c_str());
  }
  if (!all_ok) std::printf("mlakit-bench: FAILED (a check failed or a workload errored)\n");
  return all_ok ? 0 : 1;
}
