// cuBLASLt's side of the up-projection GEMM: the descriptors of one shape, its candidate
// algorithms, running one, timing several. blas_cublas.cc keeps the choice per shape; the GPU
// tests use the same functions to check that every candidate it may choose computes the same bits.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mla/blas.h"
#include "mlakit/tensor.h"

namespace mlakit {
namespace cuda {
namespace blas {

// Row-major C[m, n] = A[m, k] B[n, k]^T (B [k, n] with b_kn), `batch` of them at the strides,
// strides in elements (mla/blas.h's GemmArgs without pointers).
struct GemmShape {
  int64_t m, n, k, lda, ldb, ldc;
  DType dtype;
  bool b_kn = false;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

struct GemmAlgo {
  cublasLtMatmulAlgo_t algo;
};

struct GemmContext {
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // fixed for the process, so captured graphs stay valid
  size_t workspace_bytes = 0;
};

// On the current device; allocates the workspace (never call it inside a capture).
GemmContext create_gemm_context(size_t workspace_bytes);

// cuBLASLt's heuristic candidates for s, best first by its own ranking (at most max_count), that
// fit the context's workspace. min_align_bytes: the alignment the pointers are known to have
// (cuBLASLt assumes 256 unless told; a smaller value excludes algorithms that need more).
std::vector<GemmAlgo> gemm_candidates(const GemmContext& ctx, const GemmShape& s, int max_count,
                                      uint32_t min_align_bytes = 256);

// The first candidate for s, then those of its kernel family (CUBLASLT_ALGO_CONFIG_ID) without
// split K that the heuristic offers for s, for s with m rounded up to 256 and for m's class
// (deduplicated): they differ in tile shape, stages and cluster only, and compute every output
// element with the same k order, so the same bits (checked on the H200 by
// tests/gpu/test_mla_gemm_cuda.cc). A first candidate that splits K or reduces is returned alone:
// nothing is timed against it. Only these are timed, so on the shapes checked a tuned choice does
// not change a result.
std::vector<GemmAlgo> same_bits_candidates(const GemmContext& ctx, const GemmShape& s);

// cuBLASLt's tile id of a candidate (CUBLASLT_MATMUL_TILE_*), for logs.
int gemm_tile_id(const GemmAlgo& algo);

// Enqueues C = A B^T with algo on stream; false when cuBLASLt rejects the algorithm for s
// (nothing was enqueued then).
bool run_gemm(const GemmContext& ctx, const GemmShape& s, const GemmAlgo& algo, const void* a, const void* b, void* c,
              cudaStream_t stream);

// Milliseconds per call of each candidate on s (best of two rounds of ten back-to-back calls,
// the candidates interleaved, on random values: fill_tuning_values), -1 for one that does not
// run. a (s.m rows of s.lda) and c (s.m rows of s.ldc) are overwritten, on a stream of its own
// that is not ordered after the caller's: nothing may be using them. B is a temporary of its
// own. Waits for that stream: for creation time only.
std::vector<double> time_candidates(const GemmContext& ctx, const GemmShape& s, const std::vector<GemmAlgo>& cands,
                                    void* a, void* c);

// Fills `count` bf16 / fp16 values at p with pseudo-random finite normal numbers (random signs and
// mantissas, magnitudes in [1/16, 1)) on stream: what candidates are timed on (tuning_kernels.cu).
void fill_tuning_values(void* p, int64_t count, DType dtype, uint32_t seed, cudaStream_t stream);
// Enqueues one thread that waits `microseconds` on the GPU: calls enqueued behind it start back to
// back, however long the host takes to enqueue them (tuning_kernels.cu).
void hold_stream(uint32_t microseconds, cudaStream_t stream);

// For tests: the candidates tune() may choose among for g's shape (index 0: cuBLASLt's first
// choice), and one of them run on g through the device's context. Defined in blas_cublas.cc,
// which owns the per-device contexts.
std::vector<GemmAlgo> tuned_candidates_for_test(const mlakit::blas::GemmArgs& g, int device_index);
bool run_candidate_for_test(const mlakit::blas::GemmArgs& g, int device_index, const GemmAlgo& algo, Stream stream);

}  // namespace blas
}  // namespace cuda
}  // namespace mlakit
