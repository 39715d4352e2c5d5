// The CUDA side of the BLAS seam: cuBLAS GEMM (bf16/fp16 in and out, fp32 compute). One handle per
// device with its own fixed workspace (none by default, see below), so the call allocates nothing
// and can be captured into a CUDA graph; a mutex per handle serializes set-stream + GEMM for
// concurrent callers.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cuda/common/cuda_check.h"
#include "mla/blas.h"
#include "mlakit/error.h"

namespace mlakit {
namespace cuda {
namespace blas {
namespace {

// No cuBLAS workspace by default. With one (32 MiB is cuBLAS's recommendation on Hopper) it picks,
// for the MLA step's large up-projections (8192+ rows), kernels that zero part of it first: a
// memset node and ~4 us of idle device time per layer. Without, it picks variants of the same
// kernels at the same speed. Measured on the H200 (docs/perf-notes.md, fifth session of
// 2026-12-03): the seed step at N=100 -1.2% (budget 8192) and -4.1% (2048) with 16 heads, +0.5% /
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

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw Error(ErrorKind::kRuntime, "", std::string(what) + " failed: cuBLAS status " + std::to_string(static_cast<int>(s)));
  }
}

struct Handle {
  cublasHandle_t h = nullptr;
  void* workspace = nullptr;
  std::mutex mu;
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
    check(cublasCreate(&h->h), "cublasCreate");
    if (workspace_bytes() > 0) MLAKIT_CUDA_CHECK(cudaMalloc(&h->workspace, workspace_bytes()));
    if (prev != device) MLAKIT_CUDA_CHECK(cudaSetDevice(prev));
    slot = std::move(h);
  }
  return *slot;
}

int as_int(int64_t x, const char* what) {
  if (x < 0 || x > INT_MAX) throw Error(ErrorKind::kInvalidArgument, what, "exceeds cuBLAS's int range");
  return static_cast<int>(x);
}

}  // namespace

void init(int device_index) { handle_for(device_index); }

void gemm_nt(const mlakit::blas::GemmArgs& g, int device_index, Stream stream) {
  if (g.m == 0 || g.n == 0) return;
  Handle& hd = handle_for(device_index);
  std::lock_guard<std::mutex> lock(hd.mu);
  check(cublasSetStream(hd.h, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  // Setting the stream resets the workspace to cuBLAS's pool; a fixed one keeps graphs valid.
  check(cublasSetWorkspace(hd.h, hd.workspace, workspace_bytes()), "cublasSetWorkspace");
  const cudaDataType_t t = g.dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major C[m, n] = A[m, k] B[n, k]^T is column-major C^T[n, m] = op_T(B) op_N(A): B and A as
  // stored, column-major with leading dims ldb and lda.
  check(cublasGemmEx(hd.h, CUBLAS_OP_T, CUBLAS_OP_N, as_int(g.n, "n"), as_int(g.m, "m"), as_int(g.k, "k"),
                     &alpha, g.b, t, as_int(g.ldb, "ldb"), g.a, t, as_int(g.lda, "lda"), &beta, g.c, t,
                     as_int(g.ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

}  // namespace blas
}  // namespace cuda
}  // namespace mlakit
