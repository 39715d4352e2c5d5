// The MLA step's up-projection GEMM, timed for every algorithm cuBLASLt's heuristic offers against
// what cublasGemmEx picks by default (what src/mla/cuda/blas_cublas.cc called until session 28;
// it now tunes among these candidates, docs/mla.md). Row-major
// C[m, n] = A[m, k] B[n, k]^T with k = 512 (kv_lora_rank) and n = heads x 256, m the step's graph
// bucket. Standalone (a probe, not part of the build):
//
//   nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a bench/gemm_algo_probe.cu \
//        -lcublasLt -lcublas -o gemm_algo_probe
//   ./gemm_algo_probe [--heads 16] [--m 1024,2048,4096,8192,9216] [--iters 50] [--algos 32] [--lda 512]
//   (--lda 576: A as the MLA step holds it, latent rows of 512 + 64)
//
// Times are medians of --iters back-to-back launches between CUDA events (one event pair per
// launch), after 20 warm-up launches; the inputs stay in L2 as they do in the step (the gather
// has just written A). Prints, per m: the default's TFLOP/s, then each algorithm's with its
// workspace need and cuBLASLt's tile / stages / split-K / swizzle ids, best first, and whether its
// output is bitwise equal to the default's.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x)                                                                       \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)
#define CB(x)                                                                  \
  do {                                                                         \
    int s_ = static_cast<int>(x);                                              \
    if (s_ != 0) {                                                             \
      std::fprintf(stderr, "%s:%d cuBLAS status %d\n", __FILE__, __LINE__, s_); \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

namespace {

__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned x = unsigned(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16((float(x & 0xffff) / 65535.0f - 0.5f) * 0.2f);
  }
}

template <class F>
float median_ms(F&& launch, int iters) {
  for (int i = 0; i < 20; ++i) launch();
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(ev[2 * i]));
    launch();
    CK(cudaEventRecord(ev[2 * i + 1]));
  }
  CK(cudaDeviceSynchronize());
  std::vector<float> t(iters);
  for (int i = 0; i < iters; ++i) CK(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) CK(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return t[iters / 2];
}

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  std::string str(s);
  size_t p = 0;
  while (p < str.size()) {
    size_t q = str.find(',', p);
    if (q == std::string::npos) q = str.size();
    v.push_back(std::atoi(str.substr(p, q - p).c_str()));
    p = q + 1;
  }
  return v;
}

template <class T>
T algo_attr(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t got = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &got);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int heads = 16, iters = 50, want_algos = 32, lda = 512;
  std::vector<int> ms = {1024, 2048, 4096, 8192, 9216};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--heads")) heads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--m")) ms = parse_list(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--algos")) want_algos = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--lda")) lda = std::atoi(argv[i + 1]);
  }
  const int k = 512, n = heads * 256;
  const int mmax = *std::max_element(ms.begin(), ms.end());
  __nv_bfloat16 *A, *B, *C, *Cref;
  CK(cudaMalloc(&A, size_t(mmax) * lda * 2));
  CK(cudaMalloc(&B, size_t(n) * k * 2));
  CK(cudaMalloc(&C, size_t(mmax) * n * 2));
  CK(cudaMalloc(&Cref, size_t(mmax) * n * 2));
  fill<<<1024, 256>>>(A, size_t(mmax) * lda, 1u);
  fill<<<1024, 256>>>(B, size_t(n) * k, 2u);
  const size_t ws_bytes = size_t(32) << 20;
  void* ws = nullptr;
  CK(cudaMalloc(&ws, ws_bytes));
  cublasHandle_t h;
  CB(cublasCreate(&h));
  CB(cublasSetWorkspace(h, nullptr, 0));  // as blas_cublas.cc by default
  cublasLtHandle_t lt;
  CB(cublasLtCreate(&lt));
  const float alpha = 1.0f, beta = 0.0f;
  std::vector<__nv_bfloat16> h_ref, h_out;

  for (int m : ms) {
    const double flop = 2.0 * m * n * k;
    auto run_default = [&] {
      CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, B, CUDA_R_16BF, k, A, CUDA_R_16BF, lda, &beta,
                      Cref, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    const float t_def = median_ms(run_default, iters);
    h_ref.resize(size_t(m) * n);
    CK(cudaMemcpy(h_ref.data(), Cref, h_ref.size() * 2, cudaMemcpyDeviceToHost));
    std::printf("m=%d n=%d k=%d lda=%d  default cublasGemmEx (no workspace): %.4f ms  %.1f TFLOP/s\n", m, n, k, lda, t_def,
                flop / t_def / 1e9);

    cublasLtMatmulDesc_t op;
    CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtMatrixLayout_t la, lb, lc;
    CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, n, k));  // B stored [n, k] row-major = k x n col-major
    CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, m, lda));  // A stored [m, lda]
    CB(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n));
    for (size_t wsb : {size_t(0), ws_bytes}) {
      cublasLtMatmulPreference_t pref;
      CB(cublasLtMatmulPreferenceCreate(&pref));
      CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
      std::vector<cublasLtMatmulHeuristicResult_t> res(want_algos);
      int got = 0;
      CB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, want_algos, res.data(), &got));
      struct Row {
        int idx;
        float ms;
        size_t ws;
        int tile, stages, splitk, swz, cta_swz, id;
        bool same;
      };
      std::vector<Row> rows;
      for (int i = 0; i < got; ++i) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        auto run = [&] {
          CB(cublasLtMatmul(lt, op, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &res[i].algo, wsb ? ws : nullptr,
                            wsb, nullptr));
        };
        const float t = median_ms(run, iters);
        h_out.resize(size_t(m) * n);
        CK(cudaMemcpy(h_out.data(), C, h_out.size() * 2, cudaMemcpyDeviceToHost));
        const bool same = std::memcmp(h_out.data(), h_ref.data(), h_out.size() * 2) == 0;
        rows.push_back({i, t, res[i].workspaceSize, algo_attr<int>(res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                        algo_attr<int>(res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                        algo_attr<int>(res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                        algo_attr<int>(res[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                        algo_attr<int>(res[i].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                        algo_attr<int>(res[i].algo, CUBLASLT_ALGO_CONFIG_ID), same});
      }
      std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ms < b.ms; });
      std::printf("  cuBLASLt, max workspace %zu MiB: %d algorithms\n", wsb >> 20, got);
      for (const Row& r : rows) {
        std::printf("    heur#%-2d %.4f ms %6.1f TFLOP/s (x%.3f vs default) ws %8zu algo %d tile %d stages %d splitk %d "
                    "red %d swz %d %s\n",
                    r.idx, r.ms, flop / r.ms / 1e9, t_def / r.ms, r.ws, r.id, r.tile, r.stages, r.splitk, r.swz,
                    r.cta_swz, r.same ? "bitwise=default" : "bits differ");
      }
      CB(cublasLtMatmulPreferenceDestroy(pref));
    }
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
  }
  return 0;
}
