// The BLAS seam of the MLA up-projection: C = A * B^T (a linear layer, B in the checkpoint
// layout [out_features, in_features]) on 16-bit matrices with fp32 accumulation. The CPU side
// runs through the system BLAS (OpenBLAS; a plain blocked fallback when mlakit was built
// without one), the CUDA side through cuBLASLt (stubbed in builds without CUDA).
#pragma once

#include <cstdint>

#include "mlakit/tensor.h"

namespace mlakit {
namespace blas {

// Row-major: A [m, k] (row stride lda), B [n, k] (ldb), C [m, n] (ldc); strides in elements.
// b_kn: B is stored [k, n] instead (C = A B): the absorbed form's q_nope W_UK, where W_UK is a
// head's [qk_nope, kv_lora_rank] rows of kv_b_proj as the checkpoint holds them.
// batch > 1: `batch` independent products, the i-th at a + i * stride_a, b + i * stride_b and
// c + i * stride_c (elements): one per head in the absorbed form.
struct GemmArgs {
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* c;
  int64_t ldc;
  DType dtype;  // of A, B and C: bf16 or fp16
  bool b_kn = false;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// Dispatches on the device; m == 0 does nothing.
void gemm_nt(const GemmArgs& args, Device device, Stream stream);

void gemm_nt_cpu(const GemmArgs& args);
// True when the CPU side runs on a real BLAS library (what it was built against).
bool cpu_blas_available();
const char* cpu_blas_name();

}  // namespace blas

namespace cuda {
namespace blas {
// cuBLASLt on `device_index`, ordered on `stream` (graph-capturable: a fixed workspace per handle).
void gemm_nt(const mlakit::blas::GemmArgs& args, int device_index, Stream stream);
// Creates the device's handle and workspace now (they allocate, which a graph capture forbids).
void init(int device_index);
// The GEMMs a caller will run: up to max_m rows of A (lda), B [n, k] (ldb), C (ldc); a and c are
// the caller's buffers of max_m rows, which tuning overwrites. Times cuBLASLt's candidates that
// compute the same bits as its first choice, per class of row counts (mla/gemm_tuning.h), and
// keeps the fastest for every later gemm_nt of that shape. It runs on a stream of its own and
// waits for it, so nothing may be using a and c, and it must be called outside any capture
// (MlaStep does at creation). Classes already tuned are skipped;
// MLAKIT_GEMM_TUNE=0 makes it do nothing (cuBLASLt's first choice everywhere).
struct TuneArgs {
  int64_t max_m, n, k, lda, ldb, ldc;
  DType dtype;
  void* a;
  void* c;
};
void tune(const TuneArgs& args, int device_index);
}  // namespace blas
}  // namespace cuda
}  // namespace mlakit
