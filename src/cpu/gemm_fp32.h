// The fp32 path's small matrix product (cpu/attention_fp32.cc): C[M, N] (+)= A[M, K] B[K, N],
// row-major with leading dimensions; M a multiple of 4 (callers pad with zero rows), any N.
// Register-blocked in GCC/Clang vector extensions, an AVX2 + FMA copy chosen at run time.
#pragma once

namespace mlakit {
namespace cpu {

void gemm_f32(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
              bool accumulate);

}  // namespace cpu
}  // namespace mlakit
