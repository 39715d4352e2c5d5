// A bf16 matrix product on the CPU's bf16 units, for the MLA step's up-projection (a linear
// layer: C = A B^T with B in the checkpoint layout [out_features, in_features]).
#pragma once

#include <cstdint>

namespace mlakit {
namespace cpu {

// Whether gemm_nt_bf16 can run here (AVX-512 BF16 granted, and the path in use is not fp32)
// for this inner size (k even: the products take k in pairs).
bool gemm_nt_bf16_available(int64_t k);

// Row-major bf16 C[m, n] = A[m, k] * B[n, k]^T, row strides in elements; fp32 accumulation,
// C rounded to nearest even. On AMX tiles where the amx path is in use and k is a multiple of
// 32, else on VDPBF16PS. Runs on run_threads() threads. The order of every sum depends only
// on k, so results are bitwise the same run to run and for any m.
void gemm_nt_bf16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
                  int64_t ldb, uint16_t* c, int64_t ldc);

}  // namespace cpu
}  // namespace mlakit
