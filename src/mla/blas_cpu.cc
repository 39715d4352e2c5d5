// The CPU side of the BLAS seam. bf16 operands run on the CPU's bf16 units (cpu/gemm_bf16.h,
// VDPBF16PS) wherever the CPU backend's path is not fp32: no widened copies. Otherwise (fp16,
// or MLAKIT_CPU_ISA=fp32, or a CPU without AVX-512 BF16) 16-bit operands are widened to fp32 once
// per call and the product runs as one sgemm of the system BLAS (OpenBLAS, found by CMake:
// MLAKIT_HAVE_CBLAS); the result is rounded back into C at its stride. Without a BLAS library
// that product runs as a row-parallel loop on the CPU backend's thread pool (correct, not fast).
// (Debian's OpenBLAS 0.3.21 declares cblas_sbgemm but is built without it: no symbol to call.)
#include <cstdint>
#include <vector>

#include "cpu/gemm_bf16.h"
#include "cpu/half_convert.h"
#include "cpu/thread_pool.h"
#include "mla/blas.h"

#ifdef MLAKIT_HAVE_CBLAS
#include <cblas.h>
#endif

namespace mlakit {
namespace blas {
namespace {

float load(const void* base, int64_t i, DType t) {
  const uint16_t h = static_cast<const uint16_t*>(base)[i];
  return t == DType::kBF16 ? cpu::bf16_to_float(h) : cpu::fp16_to_float(h);
}
uint16_t store(float x, DType t) { return t == DType::kBF16 ? cpu::float_to_bf16(x) : cpu::float_to_fp16(x); }

// rows x cols of a 16-bit matrix (row stride ld) -> dense fp32.
void widen(const void* src, int64_t rows, int64_t cols, int64_t ld, DType t, std::vector<float>& dst) {
  dst.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[static_cast<size_t>(r * cols + c)] = load(src, r * ld + c, t);
}

}  // namespace

bool cpu_blas_available() {
#ifdef MLAKIT_HAVE_CBLAS
  return true;
#else
  return false;
#endif
}

const char* cpu_blas_name() {
#ifdef MLAKIT_HAVE_CBLAS
  return "cblas (OpenBLAS)";
#else
  return "none (built-in loop)";
#endif
}

namespace {

// One product of the batch, B [n, k] (ldb).
void gemm_nt_one(const GemmArgs& g) {
  if (g.dtype == DType::kBF16 && cpu::gemm_nt_bf16_available(g.k)) {
    cpu::gemm_nt_bf16(g.m, g.n, g.k, static_cast<const uint16_t*>(g.a), g.lda, static_cast<const uint16_t*>(g.b),
                      g.ldb, static_cast<uint16_t*>(g.c), g.ldc);
    return;
  }
  thread_local std::vector<float> a, b, c;
  widen(g.a, g.m, g.k, g.lda, g.dtype, a);
  widen(g.b, g.n, g.k, g.ldb, g.dtype, b);
  c.assign(static_cast<size_t>(g.m * g.n), 0.0f);
#ifdef MLAKIT_HAVE_CBLAS
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(g.m), static_cast<int>(g.n),
              static_cast<int>(g.k), 1.0f, a.data(), static_cast<int>(g.k), b.data(),
              static_cast<int>(g.k), 0.0f, c.data(), static_cast<int>(g.n));
#else
  const float* pa = a.data();
  const float* pb = b.data();
  float* pc = c.data();
  const int64_t n = g.n, k = g.k;
  cpu::parallel_for(g.m, cpu::run_threads(), [=](int64_t i) {
    for (int64_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int64_t x = 0; x < k; ++x) s += pa[i * k + x] * pb[j * k + x];
      pc[i * n + j] = s;
    }
  });
#endif
  auto* out = static_cast<uint16_t*>(g.c);
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) out[i * g.ldc + j] = store(c[static_cast<size_t>(i * g.n + j)], g.dtype);
}

}  // namespace

void gemm_nt_cpu(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0) return;
  const size_t es = 2;
  thread_local std::vector<uint16_t> bt;  // b_kn: B transposed into [n, k], the layout the products take
  for (int64_t i = 0; i < g.batch; ++i) {
    GemmArgs one = g;
    one.a = static_cast<const char*>(g.a) + i * g.stride_a * static_cast<int64_t>(es);
    one.b = static_cast<const char*>(g.b) + i * g.stride_b * static_cast<int64_t>(es);
    one.c = static_cast<char*>(g.c) + i * g.stride_c * static_cast<int64_t>(es);
    one.batch = 1;
    if (g.b_kn) {
      bt.resize(static_cast<size_t>(g.n * g.k));
      const auto* src = static_cast<const uint16_t*>(one.b);
      for (int64_t x = 0; x < g.k; ++x)
        for (int64_t j = 0; j < g.n; ++j) bt[static_cast<size_t>(j * g.k + x)] = src[x * g.ldb + j];
      one.b = bt.data();
      one.ldb = g.k;
      one.b_kn = false;
    }
    gemm_nt_one(one);
  }
}

}  // namespace blas
}  // namespace mlakit
