// The CUDA side of the BLAS seam: cuBLASLt GEMM (bf16/fp16 in and out, fp32 compute). One handle
// per device with its own fixed workspace (none by default, see below), so the call allocates
// nothing and can be captured into a CUDA graph. The algorithm of each shape comes from a cache:
// tuned ones (tune(), per class of row counts, gemm_tuning.h) or, for a shape never tuned,
// cuBLASLt's first heuristic candidate (what cublasGemmEx would run).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "cuda/common/cuda_check.h"
#include "mla/cuda/gemm_algos.h"
#include "mla/blas.h"
#include "mla/gemm_tuning.h"
#include "mlakit/error.h"

namespace mlakit {
namespace cuda {
namespace blas {
namespace {

// No cuBLAS workspace by default (measured with cublasGemmEx, before cuBLASLt and the tuning; the
// tuned candidates need none). With one (32 MiB is cuBLAS's recommendation on Hopper) it picks,
// for the MLA step's large up-projections (8192+ rows), kernels that zero part of it first: a
// memset node and ~4 us of idle device time per layer. Without, it picks variants of the same
// kernels at the same speed. Measured on the H200 (docs/performance.md): the seed step at N=100 -1.2% (budget 8192) and -4.1% (2048) with 16 heads, +0.5% /
// -0.2% with 128. MLAKIT_CUBLAS_WORKSPACE_BYTES (bytes, read once) gives cuBLAS one again.
constexpr size_t kDefaultWorkspaceBytes = 0;

size_t workspace_bytes() {
  static const size_t bytes = [] {
    const char* v = std::getenv("MLAKIT_CUBLAS_WORKSPACE_BYTES");
    if (v == nullptr || *v == '\0') return kDefaultWorkspaceBytes;
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    return (end != nullptr && *end == '\0') ? static_cast<size_t>(n) : kDefaultWorkspaceBytes;
  }();
  return bytes;
}

// MLAKIT_GEMM_TUNE=0 (read once) keeps cuBLASLt's first choice for every shape (no timing at
// tune()): the A/B switch, and what a caller gets who wants no device work at creation.
bool tuning_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MLAKIT_GEMM_TUNE");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

// MLAKIT_GEMM_TUNE_LOG=1 (read once): tune() prints each class's candidate times and its pick to
// stderr (which candidate a machine chose, when an A/B needs to know).
bool tune_log() {
  static const bool on = [] {
    const char* v = std::getenv("MLAKIT_GEMM_TUNE_LOG");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

// A shape as the algorithm cache keys it: everything that decides which algorithms apply, with
// the row count as its class for tuned entries and exact for first-choice entries (the last
// field, kKeyByClass, tells them apart).
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool, int64_t, int64_t, int64_t,
                       int64_t, bool>;
constexpr size_t kKeyByClass = 12;
Key key_of(const GemmShape& s, bool by_class) {
  return Key{by_class ? mlakit::blas::gemm_m_class(s.m) : s.m,
             s.n,
             s.k,
             s.lda,
             s.ldb,
             s.ldc,
             static_cast<int>(s.dtype),
             s.b_kn,
             s.batch,
             s.stride_a,
             s.stride_b,
             s.stride_c,
             by_class};
}

// The alignment (bytes, at most 256: what cuBLASLt assumes unless told) all three pointers share.
uint32_t common_alignment(const void* a, const void* b, const void* c) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                         reinterpret_cast<uintptr_t>(c) | uintptr_t{256};
  return static_cast<uint32_t>(bits & (~bits + 1));  // the lowest set bit
}

// Untuned shapes seen at run time (eager steps with exact row counts) are bounded, so a long run
// of distinct row counts cannot grow the cache without limit.
constexpr size_t kMaxFirstChoiceEntries = 4096;

struct Handle {
  GemmContext ctx;
  std::mutex mu;  // the cache; cuBLASLt calls themselves are thread safe
  std::map<Key, GemmAlgo> algos;
  size_t first_choice_entries = 0;
};

Handle& handle_for(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<Handle>> handles;  // live for the process
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = handles[device];
  if (!slot) {
    int prev = 0;
    MLAKIT_CUDA_CHECK(cudaGetDevice(&prev));
    if (prev != device) MLAKIT_CUDA_CHECK(cudaSetDevice(device));
    auto h = std::make_unique<Handle>();
    h->ctx = create_gemm_context(workspace_bytes());
    if (prev != device) MLAKIT_CUDA_CHECK(cudaSetDevice(prev));
    slot = std::move(h);
  }
  return *slot;
}

GemmShape shape_of(const mlakit::blas::GemmArgs& g) {
  return GemmShape{g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.dtype, g.b_kn, g.batch, g.stride_a, g.stride_b, g.stride_c};
}

// The algorithm for g: its class's tuned one, else the first choice for its exact shape (cached).
GemmAlgo algo_for(Handle& hd, const GemmShape& s) {
  std::lock_guard<std::mutex> lock(hd.mu);
  auto it = hd.algos.find(key_of(s, true));
  if (it != hd.algos.end()) return it->second;
  it = hd.algos.find(key_of(s, false));
  if (it != hd.algos.end()) return it->second;
  std::vector<GemmAlgo> c = gemm_candidates(hd.ctx, s, 1);
  if (c.empty()) {
    throw Error(ErrorKind::kRuntime, "", "cuBLASLt offers no algorithm for the up-projection GEMM (m " +
                                             std::to_string(s.m) + ", n " + std::to_string(s.n) + ", k " +
                                             std::to_string(s.k) + ")");
  }
  if (hd.first_choice_entries >= kMaxFirstChoiceEntries) {
    for (auto e = hd.algos.begin(); e != hd.algos.end();) {
      e = std::get<kKeyByClass>(e->first) ? std::next(e) : hd.algos.erase(e);
    }
    hd.first_choice_entries = 0;
  }
  hd.algos.emplace(key_of(s, false), c[0]);
  ++hd.first_choice_entries;
  return c[0];
}

}  // namespace

void init(int device_index) { handle_for(device_index); }

void gemm_nt(const mlakit::blas::GemmArgs& g, int device_index, Stream stream) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  Handle& hd = handle_for(device_index);
  const GemmShape s = shape_of(g);
  const GemmAlgo algo = algo_for(hd, s);
  if (!run_gemm(hd.ctx, s, algo, g.a, g.b, g.c, static_cast<cudaStream_t>(stream))) {
    // Rejected by cuBLASLt (it checks at enqueue, before anything runs): a class's algorithm that
    // does not take this member of the class, or pointers less aligned than the 256 bytes the
    // cached choices assume (a weight that is a view into a larger tensor). The exact shape's
    // first choice for the pointers' real alignment instead (not cached: a rare path).
    const uint32_t align = common_alignment(g.a, g.b, g.c);
    std::vector<GemmAlgo> c = gemm_candidates(hd.ctx, s, 1, align);
    if (c.empty() || !run_gemm(hd.ctx, s, c[0], g.a, g.b, g.c, static_cast<cudaStream_t>(stream))) {
      throw Error(ErrorKind::kRuntime, "", "cuBLASLt matmul failed for the up-projection GEMM (m " +
                                               std::to_string(s.m) + ", n " + std::to_string(s.n) + ")");
    }
  }
}

void tune(const TuneArgs& t, int device_index) {
  if (!tuning_enabled() || t.max_m <= 0 || t.n <= 0) return;
  Handle& hd = handle_for(device_index);
  for (const mlakit::blas::GemmClass& cls : mlakit::blas::gemm_classes_up_to(t.max_m)) {
    const GemmShape s{cls.timed_m, t.n, t.k, t.lda, t.ldb, t.ldc, t.dtype};
    const Key key = key_of(s, true);
    {
      std::lock_guard<std::mutex> lock(hd.mu);
      if (hd.algos.count(key) != 0) continue;
    }
    std::vector<GemmAlgo> cands = same_bits_candidates(hd.ctx, s);
    if (cands.empty()) continue;  // run time asks for the first choice
    const std::vector<double> ms = cands.size() > 1 ? time_candidates(hd.ctx, s, cands, t.a, t.c) : std::vector<double>{};
    const size_t pick = mlakit::blas::pick_gemm_candidate(ms);
    if (tune_log()) {
      std::string line = "mlakit gemm tune: m class " + std::to_string(cls.m_class) + " timed at m " +
                         std::to_string(s.m) + ", n " + std::to_string(s.n) + ", k " + std::to_string(s.k) + ":";
      for (size_t i = 0; i < ms.size(); ++i) {
        line += " " + std::to_string(i) + "=" + std::to_string(ms[i] * 1e3).substr(0, 7) + "us/tile" +
                std::to_string(gemm_tile_id(cands[i]));
      }
      std::fprintf(stderr, "%s -> %zu\n", line.c_str(), pick);
    }
    std::lock_guard<std::mutex> lock(hd.mu);
    hd.algos.emplace(key, cands[pick]);
  }
}

std::vector<GemmAlgo> tuned_candidates_for_test(const mlakit::blas::GemmArgs& g, int device_index) {
  return same_bits_candidates(handle_for(device_index).ctx, shape_of(g));
}

bool run_candidate_for_test(const mlakit::blas::GemmArgs& g, int device_index, const GemmAlgo& algo, Stream stream) {
  return run_gemm(handle_for(device_index).ctx, shape_of(g), algo, g.a, g.b, g.c, static_cast<cudaStream_t>(stream));
}

}  // namespace blas
}  // namespace cuda
}  // namespace mlakit
