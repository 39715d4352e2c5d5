#include "bench_seed.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_gpu.h"
#include "bench_json.h"
#include "mlakit/mlakit.h"
#include "seed_schedule.h"

namespace mlakit_bench {
namespace {

using mlakit::Device;
using mlakit::DType;
using mlakit::TensorView;
using Clock = std::chrono::steady_clock;

const char* kSeedUsage = R"(usage: mlakit-bench seed [options]

The seed's serving workload (N requests of P prompt tokens, chunked prefill under a token
budget) through every layer's MLA step (cache write, up-projection, attention), eager and
graph-replayed. Defaults: DeepSeek-Coder-V2-Lite (27 layers, 16 heads, latent 512, 128/64/128).

  --requests N[,N...]   requests per case (default 1,100 on cuda; 1 on cpu)
  --budgets B[,B...]    token budget per step (default 8192,2048)
  --prompt P            prompt tokens per request (default 999)
  --layers L            layers per step (default 27 on cuda, 2 on cpu)
  --heads H             attention heads (16; DeepSeek-V3: 128)
  --block-size S        paged cache block size (default 16)
  --modes M[,M...]      eager, graph (default both on cuda; eager on cpu)
  --reps R              timed passes over the whole schedule, median per step (default 3 cuda, 1 cpu)
  --device cpu|cuda|auto
  --per-step            also print every step's timings
  --no-check            skip the correctness check against the float64 reference
  --json PATH           write all cases as JSON
)";

struct SeedArgs {
  std::vector<int> requests, budgets;
  int prompt = 999, layers = -1, heads = 16, block_size = 16, reps = -1;
  std::vector<std::string> modes;
  std::string device = "auto", json;
  bool per_step = false, check = true;
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "mlakit-bench seed: %s\n(see mlakit-bench seed --help)\n", msg.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> r;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) if (!x.empty()) r.push_back(x);
  return r;
}

int to_int(const std::string& s, const char* what) {
  try {
    size_t used = 0;
    const long v = std::stol(s, &used);
    if (used != s.size() || v <= 0) throw std::invalid_argument(s);
    return static_cast<int>(v);
  } catch (const std::exception&) {
    usage(std::string("bad positive integer for ") + what + ": " + s);
  }
}

SeedArgs parse(int argc, char** argv) {
  SeedArgs a;
  auto need = [&](int& i) -> std::string {
    if (i + 1 >= argc) usage(std::string("missing value after ") + argv[i]);
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    if (o == "--help" || o == "-h") {
      std::fputs(kSeedUsage, stdout);
      std::exit(0);
    } else if (o == "--requests") {
      for (const auto& x : split(need(i))) a.requests.push_back(to_int(x, "--requests"));
    } else if (o == "--budgets") {
      for (const auto& x : split(need(i))) a.budgets.push_back(to_int(x, "--budgets"));
    } else if (o == "--prompt") a.prompt = to_int(need(i), "--prompt");
    else if (o == "--layers") a.layers = to_int(need(i), "--layers");
    else if (o == "--heads") a.heads = to_int(need(i), "--heads");
    else if (o == "--block-size") a.block_size = to_int(need(i), "--block-size");
    else if (o == "--modes") a.modes = split(need(i));
    else if (o == "--reps") a.reps = to_int(need(i), "--reps");
    else if (o == "--device") a.device = need(i);
    else if (o == "--per-step") a.per_step = true;
    else if (o == "--no-check") a.check = false;
    else if (o == "--json") a.json = need(i);
    else usage("unknown option " + o);
  }
  for (const auto& m : a.modes)
    if (m != "eager" && m != "graph") usage("--modes takes eager and/or graph, got " + m);
  if (a.device != "auto" && a.device != "cpu" && a.device != "cuda") usage("--device must be cpu, cuda or auto");
  return a;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Stats {
  double mean = 0, median = 0, p99 = 0;
};
Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  // Nearest rank.
  const size_t rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(n)));
  s.p99 = v[std::max<size_t>(rank, 1) - 1];
  return s;
}

// Device (or host, for the CPU) memory, released at scope end.
struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  Device dev;
  Buf(size_t n, Device d) : bytes(n), dev(d) { p = mlakit::device_alloc(std::max<size_t>(n, 256), d); }
  ~Buf() { mlakit::device_free(p, dev); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

std::vector<uint16_t> random_bf16(size_t n, double stddev, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, static_cast<float>(stddev));
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = mlakit::float_to_bf16(nd(rng));
  return v;
}

mlakit::MlaConfig model_config(int heads, int block_size, Device dev) {
  mlakit::MlaConfig c;
  c.num_heads = heads;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.dtype = DType::kBF16;
  c.block_size = block_size;
  c.device = dev;
  return c;
}

// One small step (context and new tokens, two requests) against the float64 reference.
bool self_check(const SeedArgs& a, Device dev, double* err_out) {
  std::mt19937_64 rng(7);
  mlakit::MlaConfig c = model_config(a.heads, a.block_size, dev);
  const std::vector<int32_t> q_lens = {64, 37}, ctx_lens = {40, 0};
  const int bs = a.block_size;
  const int cols = (40 + 64 + bs - 1) / bs + 1;
  c.num_blocks = 2 * cols;
  c.max_batch = 2;
  c.max_tokens = 101;
  c.max_context_tokens = 40;
  std::vector<int32_t> bt(static_cast<size_t>(2 * cols));
  for (int i = 0; i < 2 * cols; ++i) bt[static_cast<size_t>(i)] = (i * 7 + 3) % (2 * cols);  // scattered
  const int64_t H = c.num_heads, T = 101, L = 512, R = 64;
  auto q = random_bf16(static_cast<size_t>(T * H * 192), 1.0, rng);
  auto kv_c = random_bf16(static_cast<size_t>(T * L), 1.0, rng);
  auto k_pe = random_bf16(static_cast<size_t>(T * R), 1.0, rng);
  auto w = random_bf16(static_cast<size_t>(H * 256 * L), 1.0 / std::sqrt(512.0), rng);
  auto cache = random_bf16(static_cast<size_t>(c.num_blocks * bs * (L + R)), 1.0, rng);
  mlakit::MlaBatch b;
  b.batch_size = 2;
  b.query_lens = q_lens.data();
  b.context_lens = ctx_lens.data();
  b.block_table = bt.data();
  b.block_table_cols = cols;

  // Reference first: it reads the cache before the step writes into it.
  std::vector<double> ref(static_cast<size_t>(T * H * 128));
  const Device h = Device::cpu();
  mlakit::MlaLayer hy{TensorView(q.data(), DType::kBF16, {T, H, 192}, h), TensorView(kv_c.data(), DType::kBF16, {T, L}, h),
                      TensorView(k_pe.data(), DType::kBF16, {T, R}, h), TensorView(w.data(), DType::kBF16, {H * 256, L}, h),
                      TensorView(cache.data(), DType::kBF16, {c.num_blocks, bs, L + R}, h)};
  mlakit::reference::mla_step(c, b, hy, 0.0f, TensorView(ref.data(), DType::kFP64, {T, H, 128}, h));

  auto upload = [&](const std::vector<uint16_t>& v) {
    auto buf = std::make_unique<Buf>(v.size() * 2, dev);
    mlakit::copy_bytes(buf->p, dev, v.data(), h, v.size() * 2);
    return buf;
  };
  auto dq = upload(q), dc = upload(kv_c), dp = upload(k_pe), dw = upload(w), dk = upload(cache);
  Buf dout(static_cast<size_t>(T * H * 128 * 2), dev);
  mlakit::fill_bytes(dout.p, dev, 0xFF, dout.bytes);  // NaN poison
  mlakit::MlaStep step(c);
  step.plan(b);
  mlakit::MlaLayer y{TensorView(dq->p, DType::kBF16, {T, H, 192}, dev), TensorView(dc->p, DType::kBF16, {T, L}, dev),
                     TensorView(dp->p, DType::kBF16, {T, R}, dev), TensorView(dw->p, DType::kBF16, {H * 256, L}, dev),
                     TensorView(dk->p, DType::kBF16, {c.num_blocks, bs, L + R}, dev)};
  step.run(y, TensorView(dout.p, DType::kBF16, {T, H, 128}, dev));
  mlakit::synchronize(dev);
  std::vector<uint16_t> got(static_cast<size_t>(T * H * 128));
  mlakit::copy_bytes(got.data(), h, dout.p, dev, got.size() * 2);
  mlakit::synchronize(dev);
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = mlakit::bf16_to_float(got[i]);
    if (std::isnan(g)) num = INFINITY;
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  *err_out = std::sqrt(num / den);
  return *err_out <= 1e-2;
}

struct StepTiming {
  double wall_ms = 0, device_ms = 0, host_ms = 0, plan_us = 0;
};

struct CaseResult {
  int requests = 0, budget = 0, layers = 0;
  std::string mode;
  std::vector<SeedStep> steps;
  std::vector<StepTiming> timing;  // per step, median over reps
  std::vector<double> ttft_ms;     // per request: wall time of the steps until its prompt is done
};

// Everything one case keeps on the device: per-layer inputs, caches and outputs.
struct Model {
  mlakit::MlaConfig cfg;
  int layers = 0;
  int64_t rows = 0;  // token bucket: the budget
  std::vector<std::unique_ptr<Buf>> q, kv_c, k_pe, w, cache, out;

  Model(const mlakit::MlaConfig& c, int n_layers, int64_t bucket, std::mt19937_64& rng) : cfg(c), layers(n_layers), rows(bucket) {
    const Device d = c.device;
    const int64_t H = c.num_heads;
    const auto hq = random_bf16(static_cast<size_t>(rows * H * 192), 1.0, rng);
    const auto hc = random_bf16(static_cast<size_t>(rows * 512), 1.0, rng);
    const auto hp = random_bf16(static_cast<size_t>(rows * 64), 1.0, rng);
    const auto hw = random_bf16(static_cast<size_t>(H * 256 * 512), 1.0 / std::sqrt(512.0), rng);
    auto put = [&](std::vector<std::unique_ptr<Buf>>& v, const std::vector<uint16_t>& src) {
      v.push_back(std::make_unique<Buf>(src.size() * 2, d));
      mlakit::copy_bytes(v.back()->p, d, src.data(), Device::cpu(), src.size() * 2);
    };
    const size_t cache_bytes = static_cast<size_t>(c.num_blocks) * c.block_size * 576 * 2;
    for (int l = 0; l < layers; ++l) {
      put(q, hq);
      put(kv_c, hc);
      put(k_pe, hp);
      put(w, hw);
      cache.push_back(std::make_unique<Buf>(cache_bytes, d));
      mlakit::fill_bytes(cache.back()->p, d, 0, cache_bytes);
      out.push_back(std::make_unique<Buf>(static_cast<size_t>(rows * H * 128 * 2), d));
    }
    mlakit::synchronize(d);
  }

  mlakit::MlaLayer layer(int l) const {
    const Device d = cfg.device;
    const int64_t H = cfg.num_heads;
    return mlakit::MlaLayer{TensorView(q[l]->p, DType::kBF16, {rows, H, 192}, d),
                            TensorView(kv_c[l]->p, DType::kBF16, {rows, 512}, d),
                            TensorView(k_pe[l]->p, DType::kBF16, {rows, 64}, d),
                            TensorView(w[l]->p, DType::kBF16, {H * 256, 512}, d),
                            TensorView(cache[l]->p, DType::kBF16, {cfg.num_blocks, cfg.block_size, 576}, d)};
  }
  TensorView output(int l) const {
    return TensorView(out[l]->p, DType::kBF16, {rows, cfg.num_heads, 128}, cfg.device);
  }
};

// Host arrays of one step's plan, built before timing (an engine has them ready too).
struct StepInput {
  std::vector<int32_t> q_lens, ctx_lens, block_table;
  int cols = 0;
  mlakit::MlaBatch batch() const {
    mlakit::MlaBatch b;
    b.batch_size = static_cast<int>(q_lens.size());
    b.query_lens = q_lens.data();
    b.context_lens = ctx_lens.data();
    b.block_table = block_table.data();
    b.block_table_cols = cols;
    return b;
  }
};

CaseResult run_case(const SeedArgs& a, Device dev, int n, int budget, const std::string& mode, int layers, int reps) {
  CaseResult cr;
  cr.requests = n;
  cr.budget = budget;
  cr.mode = mode;
  cr.layers = layers;
  cr.steps = seed_schedule(n, a.prompt, budget);
  int64_t max_ctx = 0;
  int max_batch = 1;
  for (const SeedStep& s : cr.steps) {
    max_ctx = std::max(max_ctx, s.context);
    max_batch = std::max(max_batch, static_cast<int>(s.entries.size()));
  }
  const int bs = a.block_size;
  const int blocks_per_req = (a.prompt + bs - 1) / bs;
  mlakit::MlaConfig cfg = model_config(a.heads, bs, dev);
  cfg.num_blocks = static_cast<int64_t>(n) * blocks_per_req;
  cfg.max_batch = max_batch;
  cfg.max_tokens = budget;
  cfg.max_context_tokens = max_ctx;
  cfg.workspace_rows = budget + max_ctx;  // [context; new] always fits: one launch per layer

  // Each request owns blocks scattered over the cache.
  std::mt19937_64 rng(1234 + n);
  std::vector<int32_t> perm(static_cast<size_t>(cfg.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<StepInput> inputs;
  for (const SeedStep& s : cr.steps) {
    StepInput in;
    in.cols = blocks_per_req;
    for (const SeedEntry& e : s.entries) {
      in.q_lens.push_back(e.new_tokens);
      in.ctx_lens.push_back(e.context);
      for (int i = 0; i < blocks_per_req; ++i) in.block_table.push_back(perm[static_cast<size_t>(e.request * blocks_per_req + i)]);
    }
    inputs.push_back(std::move(in));
  }

  Model model(cfg, layers, budget, rng);
  mlakit::MlaStep step(cfg);
  const bool cuda = dev.is_cuda();
  mlakit::Stream stream = cuda ? gpu::stream_create() : nullptr;
  void* e0 = cuda ? gpu::event_create() : nullptr;
  void* e1 = cuda ? gpu::event_create() : nullptr;
  mlakit::MlaPlanOptions opts;
  const bool graph = mode == "graph";
  if (graph) opts.graph_rows = budget + max_ctx;

  auto run_layers = [&] {
    for (int l = 0; l < layers; ++l) step.run(model.layer(l), model.output(l), nullptr, stream);
  };
  // Warm-up: one eager pass over the schedule (one-time kernel setup, caches filled).
  for (const StepInput& in : inputs) {
    step.plan(in.batch(), opts, stream);
    run_layers();
  }
  if (cuda) gpu::stream_sync(stream);
  void* exec = nullptr;
  if (graph) {
    step.plan(inputs[0].batch(), opts, stream);
    gpu::capture_begin(stream);
    run_layers();
    exec = gpu::capture_end(stream);
  }

  std::vector<std::vector<StepTiming>> samples(cr.steps.size());
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      StepTiming t;
      const Clock::time_point t0 = Clock::now();
      if (cuda) gpu::event_record(e0, stream);
      step.plan(inputs[i].batch(), opts, stream);
      t.plan_us = 1000.0 * ms_since(t0);
      if (graph) gpu::graph_launch(exec, stream);
      else run_layers();
      t.host_ms = ms_since(t0);  // planning + enqueueing every layer
      if (cuda) {
        gpu::event_record(e1, stream);
        gpu::stream_sync(stream);
      }
      t.wall_ms = ms_since(t0);
      t.device_ms = cuda ? gpu::event_elapsed_ms(e0, e1) : t.wall_ms;
      samples[i].push_back(t);
    }
  }
  for (auto& s : samples) {
    StepTiming m;
    std::vector<double> w, d, h, p;
    for (const StepTiming& t : s) {
      w.push_back(t.wall_ms);
      d.push_back(t.device_ms);
      h.push_back(t.host_ms);
      p.push_back(t.plan_us);
    }
    m.wall_ms = stats_of(w).median;
    m.device_ms = stats_of(d).median;
    m.host_ms = stats_of(h).median;
    m.plan_us = stats_of(p).median;
    cr.timing.push_back(m);
  }
  // All requests arrive at t = 0: a request's first token waits for every step up to the one that
  // completes its prompt.
  cr.ttft_ms.assign(static_cast<size_t>(n), 0.0);
  double clock_ms = 0.0;
  for (size_t i = 0; i < cr.steps.size(); ++i) {
    clock_ms += cr.timing[i].wall_ms;
    for (const SeedEntry& e : cr.steps[i].entries)
      if (e.finishes) cr.ttft_ms[static_cast<size_t>(e.request)] = clock_ms;
  }
  if (exec) gpu::graph_destroy(exec);
  if (cuda) {
    gpu::event_destroy(e0);
    gpu::event_destroy(e1);
    gpu::stream_destroy(stream);
  }
  return cr;
}

void print_line(const char* label, const std::string& value) { std::printf("%-41s %-10s\n", label, value.c_str()); }
std::string fmt(double x, int prec = 2) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, x);
  return b;
}
void print_stats(const char* title, const char* what, const Stats& s, int prec = 3) {
  std::printf("%s\n", title);
  print_line((std::string("Mean ") + what + ":").c_str(), fmt(s.mean, prec));
  print_line((std::string("Median ") + what + ":").c_str(), fmt(s.median, prec));
  print_line((std::string("P99 ") + what + ":").c_str(), fmt(s.p99, prec));
}

void report(const CaseResult& c, const SeedArgs& a, const std::string& device_desc) {
  std::vector<double> wall, dev, host, share, plan;
  double total_wall = 0, total_dev = 0, total_host = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < c.steps.size(); ++i) {
    const StepTiming& t = c.timing[i];
    wall.push_back(t.wall_ms);
    dev.push_back(t.device_ms);
    host.push_back(t.host_ms);
    share.push_back(100.0 * t.host_ms / t.wall_ms);
    plan.push_back(t.plan_us);
    total_wall += t.wall_ms;
    total_dev += t.device_ms;
    total_host += t.host_ms;
    tokens += c.steps[i].tokens;
  }
  std::printf("\n============ mlakit MLA Step: Seed Serving Workload =============\n");
  print_line("Device:", device_desc);
  print_line("Mode:", c.mode == "graph" ? "CUDA graph replayed, re-planned per step" : "eager");
  print_line("Attention layers per step:", std::to_string(c.layers));
  print_line("Heads:", std::to_string(a.heads));
  print_line("Requests:", std::to_string(c.requests));
  print_line("Prompt tokens per request:", std::to_string(a.prompt));
  print_line("Token budget per step:", std::to_string(c.budget));
  print_line("Steps:", std::to_string(c.steps.size()));
  print_line("Total input tokens:", std::to_string(tokens));
  print_line("Total step time, wall (ms):", fmt(total_wall));
  print_line("Total step time, device (ms):", fmt(total_dev));
  print_line("Host share of total wall time (%):", fmt(100.0 * total_host / total_wall, 1));
  print_stats("----------------Step time, wall (ms)-----------------", "step wall (ms)", stats_of(wall));
  print_stats("---------------Step time, device (ms)----------------", "step device (ms)", stats_of(dev));
  print_stats("------Host time per step: plan + enqueue (ms)--------", "step host (ms)", stats_of(host));
  print_stats("------------Host share of step wall time (%)---------", "host share (%)", stats_of(share), 1);
  print_stats("----------plan() per step, host (us)-----------------", "plan (us)", stats_of(plan), 1);
  print_stats("------Time to First Token, attention share (ms)------", "TTFT (ms)", stats_of(c.ttft_ms));
  std::printf("==================================================\n");
  if (a.per_step) {
    std::printf("%5s %5s %7s %8s %10s %10s %9s %9s\n", "step", "reqs", "tokens", "context", "wall_ms", "device_ms",
                "host_ms", "plan_us");
    for (size_t i = 0; i < c.steps.size(); ++i)
      std::printf("%5zu %5zu %7lld %8lld %10.3f %10.3f %9.3f %9.1f\n", i, c.steps[i].entries.size(),
                  static_cast<long long>(c.steps[i].tokens), static_cast<long long>(c.steps[i].context),
                  c.timing[i].wall_ms, c.timing[i].device_ms, c.timing[i].host_ms, c.timing[i].plan_us);
  }
}

std::string case_json(const CaseResult& c, const SeedArgs& a) {
  std::ostringstream o;
  auto arr = [&](auto get) {
    std::string s = "[";
    for (size_t i = 0; i < c.timing.size(); ++i) s += (i ? ", " : "") + json_num(get(i));
    return s + "]";
  };
  std::vector<double> wall, dev, host;
  for (const StepTiming& t : c.timing) {
    wall.push_back(t.wall_ms);
    dev.push_back(t.device_ms);
    host.push_back(t.host_ms);
  }
  const Stats tt = stats_of(c.ttft_ms), sw = stats_of(wall), sd = stats_of(dev), sh = stats_of(host);
  o << "{\"mode\": " << json_str(c.mode) << ", \"requests\": " << c.requests << ", \"budget\": " << c.budget
    << ", \"prompt\": " << a.prompt << ", \"layers\": " << c.layers << ", \"heads\": " << a.heads
    << ", \"steps\": " << c.steps.size()
    << ", \"step_tokens\": " << arr([&](size_t i) { return static_cast<double>(c.steps[i].tokens); })
    << ", \"step_context\": " << arr([&](size_t i) { return static_cast<double>(c.steps[i].context); })
    << ", \"wall_ms\": " << arr([&](size_t i) { return c.timing[i].wall_ms; })
    << ", \"device_ms\": " << arr([&](size_t i) { return c.timing[i].device_ms; })
    << ", \"host_ms\": " << arr([&](size_t i) { return c.timing[i].host_ms; })
    << ", \"plan_us\": " << arr([&](size_t i) { return c.timing[i].plan_us; })
    << ", \"total_wall_ms\": " << json_num(std::accumulate(wall.begin(), wall.end(), 0.0))
    << ", \"total_device_ms\": " << json_num(std::accumulate(dev.begin(), dev.end(), 0.0))
    << ", \"total_host_ms\": " << json_num(std::accumulate(host.begin(), host.end(), 0.0))
    << ", \"step_wall_ms\": {\"mean\": " << json_num(sw.mean) << ", \"median\": " << json_num(sw.median) << ", \"p99\": " << json_num(sw.p99) << "}"
    << ", \"step_device_ms\": {\"mean\": " << json_num(sd.mean) << ", \"median\": " << json_num(sd.median) << ", \"p99\": " << json_num(sd.p99) << "}"
    << ", \"step_host_ms\": {\"mean\": " << json_num(sh.mean) << ", \"median\": " << json_num(sh.median) << ", \"p99\": " << json_num(sh.p99) << "}"
    << ", \"ttft_ms\": {\"mean\": " << json_num(tt.mean) << ", \"median\": " << json_num(tt.median) << ", \"p99\": " << json_num(tt.p99) << "}}";
  return o.str();
}

}  // namespace

int run_seed(int argc, char** argv) {
  SeedArgs a = parse(argc, argv);
  Device dev = Device::cpu();
  const int ncuda = mlakit::cuda_device_count();
  if (a.device == "cuda" || (a.device == "auto" && ncuda > 0)) {
    if (ncuda == 0 || !gpu::available()) {
      std::fprintf(stderr, "mlakit-bench seed: CUDA unusable: %s\n", mlakit::cuda_unavailable_reason().c_str());
      return 1;
    }
    dev = Device::cuda(0);
  }
  const bool cuda = dev.is_cuda();
  if (a.requests.empty()) a.requests = cuda ? std::vector<int>{1, 100} : std::vector<int>{1};
  if (a.budgets.empty()) a.budgets = {8192, 2048};
  if (a.modes.empty()) a.modes = cuda ? std::vector<std::string>{"eager", "graph"} : std::vector<std::string>{"eager"};
  if (!cuda && std::find(a.modes.begin(), a.modes.end(), "graph") != a.modes.end()) usage("--modes graph needs CUDA");
  const int layers = a.layers > 0 ? a.layers : (cuda ? 27 : 2);
  const int reps = a.reps > 0 ? a.reps : (cuda ? 3 : 1);
  const std::string desc = mlakit::device_description(dev);
  std::printf("device: %s (%s)\n", mlakit::to_string(dev).c_str(), desc.c_str());

  int rc = 0;
  if (a.check) {
    double err = 0.0;
    try {
      const bool ok = self_check(a, dev, &err);
      std::printf("check: one MLA step (2 requests, context + new tokens) vs the float64 reference: rel err %.2e %s\n",
                  err, ok ? "ok" : "FAILED");
      if (!ok) rc = 1;
    } catch (const std::exception& e) {
      std::printf("check: FAILED: %s\n", e.what());
      rc = 1;
    }
  }
  std::vector<std::string> json_cases;
  for (int n : a.requests) {
    for (int budget : a.budgets) {
      // One request of P <= budget tokens schedules the same under every budget: run it once.
      if (n == 1 && budget != a.budgets.front() && a.prompt <= std::min(budget, a.budgets.front())) continue;
      for (const std::string& mode : a.modes) {
        try {
          const CaseResult c = run_case(a, dev, n, budget, mode, layers, reps);
          report(c, a, desc);
          json_cases.push_back(case_json(c, a));
        } catch (const std::exception& e) {
          std::printf("\nseed case N=%d budget=%d %s: FAILED: %s\n", n, budget, mode.c_str(), e.what());
          rc = 1;
        }
      }
    }
  }
  if (!a.json.empty()) {
    std::ofstream f(a.json);
    f << "{\"tool\": \"mlakit-bench seed\", \"device\": " << json_str(desc) << ", \"cases\": [";
    for (size_t i = 0; i < json_cases.size(); ++i) f << (i ? ",\n  " : "\n  ") << json_cases[i];
    f << "\n]}\n";
    std::printf("\nwrote %s\n", a.json.c_str());
  }
  return rc;
}

}  // namespace mlakit_bench
