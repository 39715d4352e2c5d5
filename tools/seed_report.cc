#include "seed_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "bench_json.h"

namespace mlakit_bench {

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

namespace {

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

// The case's useful work through all its layers (seed_step_flops), in FLOP.
StepFlops case_work(const CaseResult& c) {
  StepFlops w;
  for (const SeedStep& s : c.steps) {
    const StepFlops f = seed_step_flops(s, c.dims);
    w.attention += c.layers * f.attention;
    w.up_projection += c.layers * f.up_projection;
  }
  return w;
}
std::string tera(double flop) { return fmt(flop / 1e12, 3); }

}  // namespace

void print_case(const CaseResult& c, int prompt, int heads, bool per_step, const std::string& device_desc) {
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
  print_line("Plan upload:", c.upload_in_run ? "in the step's first run() (upload_in_run)" : "in plan()");
  print_line("Attention layers per step:", std::to_string(c.layers));
  print_line("Heads:", std::to_string(heads));
  print_line("Requests:", std::to_string(c.requests));
  print_line("Prompt tokens per request:", std::to_string(prompt));
  print_line("Token budget per step:", std::to_string(c.budget));
  print_line("Steps:", std::to_string(c.steps.size()));
  print_line("MlaStep created in (ms):", fmt(c.create_ms, 1));
  print_line("Total input tokens:", std::to_string(tokens));
  if (c.mode == "graph") {
    std::string b;
    for (size_t i = 0; i < c.graph_buckets.size(); ++i) b += (i ? "," : "") + std::to_string(c.graph_buckets[i]);
    print_line("CUDA graphs (one per bucket of rows):", std::to_string(c.graph_buckets.size()) + " [" + b + "]");
    print_line("  rows per bucket above 1024:", std::to_string(c.bucket_step));
    print_line("  captured in (ms) / device memory (MB):", fmt(c.capture_ms, 1) + " / " + fmt(c.graph_mem_mb, 1));
  }
  const StepFlops work = case_work(c);
  print_line("Useful work: attention + up-proj (TFLOP):",
             tera(work.attention) + " + " + tera(work.up_projection) + " = " + tera(work.total()));
  print_line("Useful work over wall time (TFLOP/s):", fmt(work.total() / 1e12 / (total_wall * 1e-3), 1));
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
  if (per_step) {
    std::printf("%5s %5s %7s %8s %10s %10s %10s %9s %9s\n", "step", "reqs", "tokens", "context", "graph_rows",
                "wall_ms", "device_ms", "host_ms", "plan_us");
    for (size_t i = 0; i < c.steps.size(); ++i)
      std::printf("%5zu %5zu %7lld %8lld %10lld %10.3f %10.3f %9.3f %9.1f\n", i, c.steps[i].entries.size(),
                  static_cast<long long>(c.steps[i].tokens), static_cast<long long>(c.steps[i].context),
                  static_cast<long long>(i < c.graph_rows.size() ? c.graph_rows[i] : 0), c.timing[i].wall_ms,
                  c.timing[i].device_ms, c.timing[i].host_ms, c.timing[i].plan_us);
  }
}

std::string case_json(const CaseResult& c, int prompt, int heads) {
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
  const StepFlops work = case_work(c);
  o << "{\"mode\": " << json_str(c.mode) << ", \"upload_in_run\": " << (c.upload_in_run ? "true" : "false")
    << ", \"requests\": " << c.requests << ", \"budget\": " << c.budget
    << ", \"prompt\": " << prompt << ", \"layers\": " << c.layers << ", \"heads\": " << heads
    << ", \"steps\": " << c.steps.size()
    << ", \"step_tokens\": " << arr([&](size_t i) { return static_cast<double>(c.steps[i].tokens); })
    << ", \"step_context\": " << arr([&](size_t i) { return static_cast<double>(c.steps[i].context); })
    << ", \"wall_ms\": " << arr([&](size_t i) { return c.timing[i].wall_ms; })
    << ", \"device_ms\": " << arr([&](size_t i) { return c.timing[i].device_ms; })
    << ", \"host_ms\": " << arr([&](size_t i) { return c.timing[i].host_ms; })
    << ", \"plan_us\": " << arr([&](size_t i) { return c.timing[i].plan_us; })
    << ", \"graph_rows\": " << arr([&](size_t i) { return i < c.graph_rows.size() ? static_cast<double>(c.graph_rows[i]) : 0.0; })
    << ", \"graph_buckets\": [" << [&] {
         std::string b;
         for (size_t i = 0; i < c.graph_buckets.size(); ++i) b += (i ? ", " : "") + std::to_string(c.graph_buckets[i]);
         return b;
       }() << "]"
    << ", \"bucket_step\": " << c.bucket_step
    << ", \"graph_mem_mb\": " << json_num(c.graph_mem_mb) << ", \"capture_ms\": " << json_num(c.capture_ms)
    << ", \"create_ms\": " << json_num(c.create_ms)
    << ", \"work_tflop\": {\"attention\": " << json_num(work.attention / 1e12) << ", \"up_projection\": "
    << json_num(work.up_projection / 1e12) << ", \"total\": " << json_num(work.total() / 1e12) << "}"
    << ", \"total_wall_ms\": " << json_num(std::accumulate(wall.begin(), wall.end(), 0.0))
    << ", \"total_device_ms\": " << json_num(std::accumulate(dev.begin(), dev.end(), 0.0))
    << ", \"total_host_ms\": " << json_num(std::accumulate(host.begin(), host.end(), 0.0))
    << ", \"step_wall_ms\": {\"mean\": " << json_num(sw.mean) << ", \"median\": " << json_num(sw.median) << ", \"p99\": " << json_num(sw.p99) << "}"
    << ", \"step_device_ms\": {\"mean\": " << json_num(sd.mean) << ", \"median\": " << json_num(sd.median) << ", \"p99\": " << json_num(sd.p99) << "}"
    << ", \"step_host_ms\": {\"mean\": " << json_num(sh.mean) << ", \"median\": " << json_num(sh.median) << ", \"p99\": " << json_num(sh.p99) << "}"
    << ", \"ttft_ms\": {\"mean\": " << json_num(tt.mean) << ", \"median\": " << json_num(tt.median) << ", \"p99\": " << json_num(tt.p99) << "}}";
  return o.str();
}

}  // namespace mlakit_bench
