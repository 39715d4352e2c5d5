#include "bench_seed.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_gpu.h"
#include "bench_json.h"
#include "bench_source_digest.h"
#include "bench_workloads.h"
#include "mlakit/mlakit.h"
#include "seed_check.h"
#include "seed_model.h"
#include "seed_report.h"
#include "seed_schedule.h"

namespace mlakit_bench {
namespace {

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
  --modes M[,M...]      eager, graph (default both on cuda; eager on cpu). graph: one CUDA graph
                        per bucket of context + new rows (256-row steps, capped at budget +
                        largest context; see --bucket-step), captured before the timed
                        passes; each step re-planned with graph_rows = its bucket, then replayed
  --bucket-step S       graph mode: rows per bucket above 1024 (default 256); the padding up to a
                        bucket is up-projection and gather work on rows nothing reads
  --reps R              timed passes over the whole schedule, median per step (default 3 cuda, 1 cpu)
  --device cpu|cuda|auto
  --per-step            also print every step's timings
  --upload-in-run       MlaConfig::upload_in_run: plan() only writes host memory, the step's
                        first run() (in a graph: the graph's first node) uploads the plan
  --host-probe          graph mode: after the timed passes, time single host calls (the pieces of
                        plan()'s upload, plan() itself, a graph launch, a fixed CPU loop) right
                        after waiting for a replayed step, and back to back: what a step's host
                        time is made of on this machine
  --no-check            skip the correctness check against the float64 reference
  --json PATH           write all cases as JSON
  --print-schedule      print the schedule of one case as JSON and exit (nothing runs): the
                        first of --requests (or --prompts) and of --budgets, with each step's
                        graph_rows under --bucket-step and its useful FLOP at --heads;
                        bench/seed_schedule.py reads the schedule this way
  --prompts LENS        explicit prompt lengths instead of --requests x --prompt, in --lens
                        syntax (e.g. 300,77,2x150)
)";

struct SeedArgs {
  std::vector<int> requests, budgets;
  int prompt = 999, layers = -1, heads = 16, block_size = 16, reps = -1;
  int64_t bucket_step = 256;
  std::vector<int32_t> prompts;  // --prompts: explicit lengths (print-schedule)
  std::vector<std::string> modes;
  std::string device = "auto", json;
  bool per_step = false, check = true, host_probe = false, upload_in_run = false, print_schedule = false;
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
    else if (o == "--bucket-step") a.bucket_step = to_int(need(i), "--bucket-step");
    else if (o == "--modes") a.modes = split(need(i));
    else if (o == "--reps") a.reps = to_int(need(i), "--reps");
    else if (o == "--device") a.device = need(i);
    else if (o == "--per-step") a.per_step = true;
    else if (o == "--host-probe") a.host_probe = true;
    else if (o == "--upload-in-run") a.upload_in_run = true;
    else if (o == "--no-check") a.check = false;
    else if (o == "--json") a.json = need(i);
    else if (o == "--print-schedule") a.print_schedule = true;
    else if (o == "--prompts") {
      try {
        a.prompts = parse_lens(need(i));
      } catch (const std::exception& e) {
        usage(std::string("--prompts: ") + e.what());
      }
    } else usage("unknown option " + o);
  }
  for (const auto& m : a.modes)
    if (m != "eager" && m != "graph") usage("--modes takes eager and/or graph, got " + m);
  if (a.device != "auto" && a.device != "cpu" && a.device != "cuda") usage("--device must be cpu, cuda or auto");
  return a;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Host time of one call, median of `reps`, measured two ways: right after the host waited for a
// replayed step (as a serving engine meets its next plan(): it synchronized to read the sampled
// tokens), and back to back with the previous call. Prints one row.
template <class Wait, class Call>
void probe_row(const char* name, int reps, Wait&& wait, Call&& call) {
  std::vector<double> after, hot;
  for (int r = 0; r < reps; ++r) {
    wait();
    Clock::time_point t0 = Clock::now();
    call();
    after.push_back(1000.0 * ms_since(t0));
    t0 = Clock::now();
    call();
    hot.push_back(1000.0 * ms_since(t0));
  }
  std::printf("  %-44s %10.1f %10.1f\n", name, stats_of(after).median, stats_of(hot).median);
}

CaseResult run_case(const SeedArgs& a, Device dev, int n, int budget, const std::string& mode, int layers, int reps) {
  CaseResult cr;
  cr.requests = n;
  cr.budget = budget;
  cr.mode = mode;
  cr.upload_in_run = a.upload_in_run;
  cr.bucket_step = mode == "graph" ? a.bucket_step : 0;
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
  cfg.upload_in_run = a.upload_in_run;
  cr.dims = MlaDims{cfg.num_heads, cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim};

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
  // Creation allocates and, on CUDA, times the up-projection GEMM's candidates (docs/mla.md).
  const Clock::time_point t_create = Clock::now();
  mlakit::MlaStep step(cfg);
  cr.create_ms = ms_since(t_create);
  const bool cuda = dev.is_cuda();
  mlakit::Stream stream = cuda ? gpu::stream_create() : nullptr;
  void* e0 = cuda ? gpu::event_create() : nullptr;
  void* e1 = cuda ? gpu::event_create() : nullptr;
  const bool graph = mode == "graph";
  // Per step: its rows in the layer tensors, and (graph mode) its bucket, planned as graph_rows.
  std::vector<int64_t> bucket(inputs.size(), 0), rows(inputs.size(), 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const SeedStep& s = cr.steps[i];
    bucket[i] = graph ? mlakit::graph_rows_bucket(s.tokens + s.context, cfg.workspace_rows, a.bucket_step) : 0;
    rows[i] = graph ? std::min<int64_t>(bucket[i], budget) : s.tokens;
  }
  auto options = [&](size_t i) {
    mlakit::MlaPlanOptions o;
    o.graph_rows = bucket[i];
    return o;
  };
  auto run_layers = [&](int64_t n) {
    for (int l = 0; l < layers; ++l) step.run(model.layer(l, n), model.output(l, n), nullptr, stream);
  };
  // Warm-up: one eager pass over the schedule (one-time kernel setup, caches filled).
  for (size_t i = 0; i < inputs.size(); ++i) {
    step.plan(inputs[i].batch(), {}, stream);
    run_layers(cr.steps[i].tokens);
  }
  if (cuda) gpu::stream_sync(stream);
  // Graph mode: one graph per bucket the schedule uses, captured here, before the timed passes
  // (an engine captures its buckets at start-up). Each capture follows one eager run under the
  // bucket's plan, so nothing is set up for the first time inside the capture.
  std::map<int64_t, std::unique_ptr<mlakit::StreamGraph>> graphs;
  if (graph) {
    const size_t free0 = gpu::device_free_bytes();
    const Clock::time_point t0 = Clock::now();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (graphs.count(bucket[i])) continue;
      step.plan(inputs[i].batch(), options(i), stream);
      run_layers(rows[i]);
      auto g = std::make_unique<mlakit::StreamGraph>(dev);
      g->begin_capture(stream);
      run_layers(rows[i]);
      g->end_capture();
      graphs[bucket[i]] = std::move(g);
      gpu::stream_sync(stream);
    }
    cr.capture_ms = ms_since(t0);
    const size_t free1 = gpu::device_free_bytes();
    cr.graph_mem_mb = free0 > free1 ? static_cast<double>(free0 - free1) / (1 << 20) : 0.0;
    for (const auto& g : graphs) cr.graph_buckets.push_back(g.first);
  }
  cr.graph_rows = bucket;
  const bool probe = graph && a.host_probe;

  std::vector<std::vector<StepTiming>> samples(cr.steps.size());
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      StepTiming t;
      const Clock::time_point t0 = Clock::now();
      if (cuda) gpu::event_record(e0, stream);
      step.plan(inputs[i].batch(), options(i), stream);
      t.plan_us = 1000.0 * ms_since(t0);
      if (graph) graphs.at(bucket[i])->launch(stream);
      else run_layers(rows[i]);
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
  if (probe) {
    const int pr = 50;
    const mlakit::StreamGraph& g0 = *graphs.at(bucket[0]);
    auto wait_step = [&] {  // one replayed step under step 0's plan, then the host waits for it
      step.plan(inputs[0].batch(), options(0), stream);
      g0.launch(stream);
      gpu::stream_sync(stream);
    };
    std::printf("\nhost probe, N=%d budget %d, step 0 (graph of %d layers); medians of %d, us\n", n, budget,
                layers, pr);
    std::printf("  %-44s %10s %10s\n", "call", "after wait", "hot");
    probe_row("nothing (two clock reads)", pr, wait_step, [] {});
    volatile uint64_t sink = 0;
    std::vector<uint32_t> buf(1 << 14, 7u);
    probe_row("CPU loop over 64 KiB", pr, wait_step, [&] {
      uint64_t x = 0;
      for (uint32_t v : buf) x = x * 31 + v;
      sink = sink + x;
    });
    void* ev = gpu::event_create();
    gpu::event_record(ev, stream);
    gpu::stream_sync(stream);
    probe_row("cudaEventSynchronize (completed event)", pr, wait_step, [&] { gpu::event_sync(ev); });
    probe_row("cudaEventRecord", pr, wait_step, [&] { gpu::event_record(ev, stream); });
    for (size_t kb : {4, 64}) {
      void* h = mlakit::pinned_alloc(kb << 10);
      void* d = mlakit::device_alloc(kb << 10, dev);
      const std::string name = "H2D copy (cudaMemcpyAsync), pinned, " + std::to_string(kb) + " KiB";
      probe_row(name.c_str(), pr, wait_step,
                [&] { mlakit::copy_bytes(d, dev, h, Device::cpu(), kb << 10, stream); });
      gpu::stream_sync(stream);
      mlakit::device_free(d, dev);
      mlakit::pinned_free(h);
    }
    probe_row("MlaStep::plan (step 0)", pr, wait_step, [&] { step.plan(inputs[0].batch(), options(0), stream); });
    probe_row("graph launch (step 0's StreamGraph)", pr, wait_step, [&] { g0.launch(stream); });
    gpu::stream_sync(stream);
    gpu::event_destroy(ev);
  }
  if (cuda) {
    gpu::event_destroy(e0);
    gpu::event_destroy(e1);
    gpu::stream_destroy(stream);
  }
  return cr;
}

}  // namespace

int run_seed(int argc, char** argv) {
  SeedArgs a = parse(argc, argv);
  if (a.print_schedule) {
    const int budget = a.budgets.empty() ? 8192 : a.budgets.front();
    std::vector<int32_t> prompts = a.prompts;
    if (prompts.empty()) prompts.assign(static_cast<size_t>(a.requests.empty() ? 1 : a.requests.front()), a.prompt);
    MlaDims dims;
    dims.heads = a.heads;
    try {
      std::printf("%s\n", seed_schedule_json(seed_schedule(prompts, budget), budget, a.bucket_step, dims).c_str());
    } catch (const std::exception& e) {
      usage(e.what());
    }
    return 0;
  }
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
      const bool ok = seed_self_check(a.heads, a.block_size, dev, &err);
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
          print_case(c, a.prompt, a.heads, a.per_step, desc);
          json_cases.push_back(case_json(c, a.prompt, a.heads));
        } catch (const std::exception& e) {
          std::printf("\nseed case N=%d budget=%d %s: FAILED: %s\n", n, budget, mode.c_str(), e.what());
          rc = 1;
        }
      }
    }
  }
  if (!a.json.empty()) {
    std::ofstream f(a.json);
    f << "{\"tool\": \"mlakit-bench seed\", \"device\": " << json_str(desc)
      << ", \"source_digest\": " << json_str(source_digest()) << ", \"cases\": [";
    for (size_t i = 0; i < json_cases.size(); ++i) f << (i ? ",\n  " : "\n  ") << json_cases[i];
    f << "\n]}\n";
    std::printf("\nwrote %s\n", a.json.c_str());
  }
  return rc;
}

}  // namespace mlakit_bench
