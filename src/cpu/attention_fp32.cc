// The fp32 path of the CPU backend, for CPUs without bf16 matrix units (and forced by
// MLAKIT_CPU_ISA=fp32). Per item, flash-style: the tile's q rows are converted to fp32 once
// (pre-scaled), then the visible kv range is walked in block_n chunks. Each chunk of K is
// converted to fp32 once, transposed, so that S = Q K^T and O += P V are both small row-major
// GEMMs whose inner loop runs along contiguous memory (4 x 8 register-blocked micro-kernel in
// GCC/Clang vector extensions, plus an AVX2 + FMA copy picked at run time on x86-64).
// Softmax is online (running max and sum per row, base-2 exponentials), accumulation is fp32,
// and the order of operations depends only on the schedule, so repeated runs are bitwise equal.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/attention_item.h"
#include "cpu/gemm_fp32.h"
#include "cpu/half_convert.h"
#include "cpu/softmax_row_f32.h"

namespace mlakit {
namespace cpu {
namespace {

// Micro-kernel blocking: kMR rows x kNR columns of accumulators, 8 128-bit registers (wider
// blocks measured slower here). Buffers are padded to kMR rows and kNR columns.
constexpr int kMR = 4;
constexpr int kNR = 8;

int round_up(int x, int a) { return (x + a - 1) / a * a; }

// C[0:MR, 0:NR] (+)= A[0:MR, 0:K] * B[0:K, 0:NR]; the accumulators stay in registers across
// the whole K loop. GCC/Clang vector extensions make the register blocking explicit (plain
// loops get auto-vectorized across rows, with gathers, which is 3x slower); other compilers get
// the plain loops.
#if defined(__GNUC__)
typedef float v4f __attribute__((vector_size(16)));

template <int MR, int NR>
inline __attribute__((always_inline)) void micro_kernel(int K, const float* __restrict A, int lda,
                                                        const float* __restrict B, int ldb,
                                                        float* __restrict C, int ldc,
                                                        bool accumulate) {
  static_assert(NR % 4 == 0, "NR is a multiple of the vector width");
  constexpr int kV = NR / 4;
  v4f acc[MR][kV];
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < kV; ++c) {
      acc[r][c] = v4f{};
      if (accumulate) std::memcpy(&acc[r][c], C + r * ldc + 4 * c, sizeof(v4f));
    }
  for (int k = 0; k < K; ++k) {
    const float* b = B + static_cast<int64_t>(k) * ldb;
    v4f bv[kV];
    std::memcpy(bv, b, sizeof(bv));
    for (int r = 0; r < MR; ++r) {
      const float a = A[r * lda + k];
      const v4f av = {a, a, a, a};
      for (int c = 0; c < kV; ++c) acc[r][c] += av * bv[c];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < kV; ++c) std::memcpy(C + r * ldc + 4 * c, &acc[r][c], sizeof(v4f));
}
#else
template <int MR, int NR>
inline void micro_kernel(int K, const float* __restrict A, int lda, const float* __restrict B,
                         int ldb, float* __restrict C, int ldc, bool accumulate) {
  float acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < NR; ++c) acc[r][c] = accumulate ? C[r * ldc + c] : 0.0f;
  for (int k = 0; k < K; ++k) {
    const float* b = B + static_cast<int64_t>(k) * ldb;
    for (int r = 0; r < MR; ++r) {
      const float a = A[r * lda + k];
      for (int c = 0; c < NR; ++c) acc[r][c] += a * b[c];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < NR; ++c) C[r * ldc + c] = acc[r][c];
}
#endif

// C[M, N] (+)= A[M, K] * B[K, N]. M must be a multiple of kMR (callers pad with zero rows);
// any N works (a scalar loop takes the columns past the last full kNR block).
template <int MR, int NR>
inline __attribute__((always_inline)) void gemm_impl(int M, int N, int K, const float* A, int lda,
                                                     const float* B, int ldb, float* C, int ldc,
                                                     bool accumulate) {
  const int n_full = N / NR * NR;
  for (int i = 0; i < M; i += MR) {
    for (int j = 0; j < n_full; j += NR)
      micro_kernel<MR, NR>(K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc, accumulate);
    for (int r = i; r < i + MR; ++r) {
      for (int j = n_full; j < N; ++j) {
        float s = accumulate ? C[r * ldc + j] : 0.0f;
        for (int k = 0; k < K; ++k) s += A[r * lda + k] * B[static_cast<int64_t>(k) * ldb + j];
        C[r * ldc + j] = s;
      }
    }
  }
}

void gemm_portable(int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                   float* C, int ldc, bool accumulate) {
  gemm_impl<kMR, kNR>(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(MLAKIT_NO_AVX2)
#define MLAKIT_CPU_HAVE_AVX2_PATH 1
// The build targets baseline x86-64 (SSE2); this copy is compiled for AVX2 + FMA and chosen at
// run time when the CPU has them (about 1.3x faster). Its multiply-adds are fused, which changes
// rounding slightly, but deterministically on a given machine.
__attribute__((target("avx2,fma"))) void gemm_avx2(int M, int N, int K, const float* A, int lda,
                                                   const float* B, int ldb, float* C, int ldc,
                                                   bool accumulate) {
  gemm_impl<kMR, kNR>(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
#endif

using GemmFn = void (*)(int, int, int, const float*, int, const float*, int, float*, int, bool);

GemmFn pick_gemm() {
#ifdef MLAKIT_CPU_HAVE_AVX2_PATH
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return gemm_avx2;
#endif
  return gemm_portable;
}

const GemmFn gemm = pick_gemm();

}  // namespace

void gemm_f32(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
              bool accumulate) {
  gemm(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

namespace {


// Per-thread buffers, grown on demand and kept for later runs.
struct Scratch {
  std::vector<float> q, kt, v, s, o, m, l;
  std::vector<int64_t> row_lo, row_hi;
};

}  // namespace

template <DType D>
void run_item_fp32(const Problem& p, int64_t item_index) {
  thread_local Scratch w;
  using E = Elem<D>;
  using T = typename E::T;
  const ItemRows item(p, item_index);
  const int head = item.head, kv_head = item.kv_head, rope_head = item.rope_head;
  const int64_t q_begin = item.q_begin, kv_begin = item.kv_begin, lq = item.lq, lk = item.lk, row0 = item.row0;
  const int rows = item.rows;
  if (rows <= 0) return;
  const int mp = round_up(rows, kMR);
  const int ldk = round_up(p.block_n, kNR);
  const int dqk = p.dqk, dvo = p.dvo;
  const bool capped = p.soft_cap > 0.0f;

  w.q.assign(static_cast<size_t>(mp) * dqk, 0.0f);
  w.kt.resize(static_cast<size_t>(dqk) * ldk);
  w.v.resize(static_cast<size_t>(p.block_n) * dvo);
  w.s.resize(static_cast<size_t>(mp) * ldk);
  w.o.assign(static_cast<size_t>(mp) * dvo, 0.0f);
  w.m.assign(mp, -std::numeric_limits<float>::infinity());
  w.l.assign(mp, 0.0f);
  w.row_lo.resize(mp);
  w.row_hi.resize(mp);

  // Visible keys per row; the tile walks the union (both bounds grow with the row index, but
  // taking min/max keeps this independent of that).
  int64_t tile_lo = lk, tile_hi = 0;
  for (int r = 0; r < rows; ++r) {
    const plan::KvRange kr = plan::visible_kv_range(row0 + r, lq, lk, p.header->causal != 0,
                                                    p.header->window_left);
    w.row_lo[r] = kr.lo;
    w.row_hi[r] = std::max(kr.lo, kr.hi);
    if (w.row_hi[r] > w.row_lo[r]) {
      tile_lo = std::min(tile_lo, w.row_lo[r]);
      tile_hi = std::max(tile_hi, w.row_hi[r]);
    }
  }

  // Q rows in fp32, pre-multiplied so the GEMM gives base-2 logits directly (or sm_scale-scaled
  // logits when the soft cap needs them before tanh).
  const float q_scale = (capped ? p.sm_scale : p.sm_scale * kLog2e) * item.qk_factor(p);
  for (int r = 0; r < rows; ++r) {
    const T* src = static_cast<const T*>(p.q->ptr_at(q_begin + row0 + r, head));
    float* dst = &w.q[static_cast<size_t>(r) * dqk];
    for (int d = 0; d < dqk; ++d) dst[d] = E::load(src[d]) * q_scale;
  }

  float* __restrict qf = w.q.data();
  float* __restrict kt = w.kt.data();
  float* __restrict vf = w.v.data();
  float* __restrict sf = w.s.data();
  float* __restrict of = w.o.data();
  const float inv_cap = capped ? 1.0f / p.soft_cap : 0.0f;
  const float cap_log2 = p.soft_cap * kLog2e;

  for (int64_t c0 = tile_lo; c0 < tile_hi; c0 += p.block_n) {
    const int n = static_cast<int>(std::min<int64_t>(p.block_n, tile_hi - c0));
    const int np = round_up(n, kNR);
    // K chunk -> kt[d][j] (transposed, zero columns past n); V chunk -> vf[j][d].
    for (int j = 0; j < n; ++j) {
      const T* ks = static_cast<const T*>(p.k->ptr_at(kv_begin + c0 + j, kv_head));
      for (int d = 0; d < p.dk_split; ++d) kt[static_cast<size_t>(d) * ldk + j] = E::load(ks[d]);
      if (p.dk_split < dqk) {
        const T* kr = static_cast<const T*>(p.k_rope->ptr_at(kv_begin + c0 + j, rope_head));
        for (int d = 0; d < dqk - p.dk_split; ++d)
          kt[static_cast<size_t>(p.dk_split + d) * ldk + j] = E::load(kr[d]);
      }
      const T* vs = static_cast<const T*>(p.v->ptr_at(kv_begin + c0 + j, kv_head));
      float* vd = vf + static_cast<size_t>(j) * dvo;
      for (int d = 0; d < dvo; ++d) vd[d] = E::load(vs[d]);
    }
    for (int d = 0; d < dqk; ++d)
      for (int j = n; j < np; ++j) kt[static_cast<size_t>(d) * ldk + j] = 0.0f;

    gemm(mp, np, dqk, qf, dqk, kt, ldk, sf, ldk, /*accumulate=*/false);

    // Online softmax; S becomes P in place (zero outside each row's visible keys).
    for (int r = 0; r < mp; ++r) {
      float* srow = sf + static_cast<size_t>(r) * ldk;
      int ja = 0, jb = 0;
      if (r < rows) {
        ja = static_cast<int>(std::clamp<int64_t>(w.row_lo[r] - c0, 0, n));
        jb = static_cast<int>(std::clamp<int64_t>(w.row_hi[r] - c0, 0, n));
      }
      if (ja >= jb) {
        for (int j = 0; j < n; ++j) srow[j] = 0.0f;
        continue;
      }
      if (capped)
        for (int j = ja; j < jb; ++j) srow[j] = cap_log2 * std::tanh(srow[j] * inv_cap);
      softmax_row_f32(srow, n, ja, jb, w.m[r], w.l[r], of + static_cast<size_t>(r) * dvo, dvo);
    }

    gemm(mp, dvo, n, sf, ldk, vf, dvo, of, dvo, /*accumulate=*/true);
  }

  // Normalize and store: rows that saw no key get exactly 0 and lse = -inf. l is 0 only there
  // (a row with a key has l >= 1); a NaN l (a NaN score) must reach the output, not become 0.
  for (int r = 0; r < rows; ++r) {
    const int64_t tok = q_begin + row0 + r;
    T* dst = static_cast<T*>(p.out->ptr_at(tok, head));
    const float l = w.l[r];
    const float* orow = of + static_cast<size_t>(r) * dvo;
    if (l != 0.0f) {
      const float inv_l = item.v_factor(p) / l;
      for (int d = 0; d < dvo; ++d) dst[d] = E::store(orow[d] * inv_l);
    } else {
      for (int d = 0; d < dvo; ++d) dst[d] = E::store(0.0f);
    }
    if (p.lse != nullptr) {
      float* lp = static_cast<float*>(p.lse->ptr_at(tok, head));
      *lp = l != 0.0f ? (w.m[r] + std::log2(l)) * kLn2 : -std::numeric_limits<float>::infinity();
    }
  }
}

template void run_item_fp32<DType::kBF16>(const Problem&, int64_t);
template void run_item_fp32<DType::kFP16>(const Problem&, int64_t);
template void run_item_fp32<DType::kFP32>(const Problem&, int64_t);

}  // namespace cpu
}  // namespace mlakit
