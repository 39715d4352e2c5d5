// Named workloads: the shapes of DeepSeek MLA prefill (H=16 per GPU under TP8, or 128 heads for
// V3 on one GPU), with (Dqk, Dvo) = (192, 128), read from bench/workloads.txt.
#include "bench_workloads.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace mlakit_bench {

namespace {

// A non-negative decimal integer, all of `s` (std::stol would accept "12abc" and report "abc"
// as "stol").
bool parse_count(const std::string& s, long* out) {
  if (s.empty() || s.size() > 10) return false;
  long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

int64_t Workload::total_q() const {
  int64_t s = 0;
  for (int32_t l : q_lens) s += l;
  return s;
}

int64_t Workload::total_kv() const {
  int64_t s = 0;
  for (int32_t l : kv_lens) s += l;
  return s;
}

static std::vector<int32_t> prefix(const std::vector<int32_t>& lens) {
  std::vector<int32_t> p(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) p[i + 1] = p[i] + lens[i];
  return p;
}

std::vector<int32_t> Workload::qo_indptr() const { return prefix(q_lens); }
std::vector<int32_t> Workload::kv_indptr() const { return prefix(kv_lens); }

size_t Workload::bytes_per_set() const {
  const size_t e = mlakit::dtype_size(dtype);
  const size_t q = static_cast<size_t>(total_q()) * heads * dqk;
  const size_t k = static_cast<size_t>(total_kv()) * kv_heads * dqk;
  const size_t v = static_cast<size_t>(total_kv()) * kv_heads * dvo;
  const size_t o = static_cast<size_t>(total_q()) * heads * dvo;
  const size_t eo = dtype == mlakit::DType::kE4M3 ? 2 : e;  // e4m3 writes bf16
  return e * (q + k + v) + eo * o;
}

// bench/workloads.txt, embedded by CMake (the one definition of the named workloads).
static const char kWorkloadsTxt[] =
#include "bench_workloads_txt.inc"
    ;

std::vector<Workload> parse_workloads(const std::string& text) {
  std::vector<Workload> all;
  std::istringstream lines(text);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream f(line);
    std::string name, q, kv, mask, heads;
    if (!(f >> name)) continue;  // blank or comment
    std::string extra;
    if (!(f >> q >> kv >> mask >> heads) || (f >> extra))
      throw std::invalid_argument("workloads line " + std::to_string(n) + ": want name, q lengths, kv lengths, mask, heads");
    Workload w;
    w.name = name;
    w.q_lens = parse_lens(q);
    w.kv_lens = parse_lens(kv);
    if (w.q_lens.size() != w.kv_lens.size())
      throw std::invalid_argument("workloads line " + std::to_string(n) + ": as many q as kv lengths");
    if (mask != "causal" && mask != "non-causal")
      throw std::invalid_argument("workloads line " + std::to_string(n) + ": mask is causal or non-causal");
    w.options.causal = mask == "causal";
    long h = 0;
    if (!parse_count(heads, &h) || h < 1)
      throw std::invalid_argument("workloads line " + std::to_string(n) + ": heads is a positive number");
    w.heads = w.kv_heads = static_cast<int>(h);
    all.push_back(std::move(w));
  }
  return all;
}

std::vector<Workload> named_workloads() {
  static const std::vector<Workload> all = parse_workloads(kWorkloadsTxt);
  return all;
}

bool find_named(const std::string& name, Workload* out) {
  for (const Workload& w : named_workloads()) {
    if (w.name == name) {
      *out = w;
      return true;
    }
  }
  return false;
}

Workload scaled(const Workload& w, int divisor) {
  if (divisor <= 1) return w;
  Workload s = w;
  for (int32_t& l : s.q_lens) l = std::max<int32_t>(1, l / divisor);
  for (int32_t& l : s.kv_lens) l = std::max<int32_t>(1, l / divisor);
  s.scale_divisor = w.scale_divisor * divisor;
  return s;
}


std::vector<int32_t> parse_lens(const std::string& spec) {
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(pos, comma - pos);
    if (item.empty()) throw std::invalid_argument("empty length in '" + spec + "'");
    long count = 1, len = 0;
    const size_t x = item.find('x');
    if (x != std::string::npos) {
      if (!parse_count(item.substr(0, x), &count))
        throw std::invalid_argument("'" + item + "': the count before 'x' is not a number");
      if (!parse_count(item.substr(x + 1), &len))
        throw std::invalid_argument("'" + item + "': the length after 'x' is not a number");
    } else if (!parse_count(item, &len)) {
      throw std::invalid_argument("'" + item + "' is not a length (a number, or NxL for N times L)");
    }
    if (count < 1 || len > (1L << 30))
      throw std::invalid_argument("out of range: '" + item + "'");
    for (long i = 0; i < count; ++i) out.push_back(static_cast<int32_t>(len));
    pos = comma + 1;
  }
  return out;
}

}  // namespace mlakit_bench
