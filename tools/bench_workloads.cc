// Named workloads: the shapes of DeepSeek MLA prefill (H=16 per GPU under TP8, or 128 heads for
// V3 on one GPU), with (Dqk, Dvo) = (192, 128). Mirrored in bench/workloads.py.
#include "bench_workloads.h"

#include <algorithm>
#include <stdexcept>

namespace mlakit_bench {

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

static Workload make(const std::string& name, std::vector<int32_t> q, std::vector<int32_t> kv,
                     bool causal, int heads = 16) {
  Workload w;
  w.name = name;
  w.q_lens = std::move(q);
  w.kv_lens = std::move(kv);
  w.heads = heads;
  w.kv_heads = heads;
  w.options.causal = causal;
  return w;
}

std::vector<Workload> named_workloads() {
  std::vector<Workload> all;
  all.push_back(make("1x999", {999}, {999}, true));
  {
    // One chunked-prefill step: 8 x 999 + 200 = 8192 tokens.
    std::vector<int32_t> l(8, 999);
    l.push_back(200);
    all.push_back(make("8x999+200", l, l, true));
  }
  {
    std::vector<int32_t> l(100, 999);
    all.push_back(make("100x999", l, l, true));
  }
  all.push_back(make("1x16384", {16384}, {16384}, true));
  all.push_back(make("1x32768", {32768}, {32768}, false));
  all.push_back(make("ctx_8x1024_vs_4096", std::vector<int32_t>(8, 1024),
                     std::vector<int32_t>(8, 4096), false));
  all.push_back(make("v3_128h_4096", {4096}, {4096}, true, 128));
  // DeepSeek-V3 on one GPU (128 heads), one 8192-token prompt (issue 6: "H=128, 1x8192 causal").
  all.push_back(make("v3_128h_8192", {8192}, {8192}, true, 128));
  // The context chunk of a request cut at an 8192-token budget (8 x 999 + 200): its other 799
  // tokens attend to the 200 cached ones, no mask.
  all.push_back(make("ctx_799_vs_200", {799}, {200}, false));
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
