// gemm_nt_bf16 on VDPBF16PS. B is packed once per call into 64-column panels of key pairs
// ([k / 2][64] 32-bit words: the bf16 pair (B[j][2x], B[j][2x + 1]) of column j), then each
// work item computes a block of rows x panels: 6 rows x 64 columns of fp32 accumulators stay in
// registers over the whole k loop, A's pairs broadcast straight from its rows.
// Blocks of kRowChunk rows x kPanelGroup panels keep their A rows and B panels in L2.
// Where the amx path is in use (and k is whole k-steps of 32), the same panels go to the tile
// kernel instead (gemm_bf16_amx.cc): they are already B tiles.
#include "cpu/gemm_bf16.h"

#include <algorithm>

#include "cpu/aligned_scratch.h"
#include "cpu/cpu_isa.h"
#include "cpu/gemm_bf16_amx.h"
#include "cpu/lane_mask.h"
#include "cpu/thread_pool.h"

#if defined(__GNUC__) && defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 headers
#include <immintrin.h>

#include "cpu/avx512bf16_parts.h"  // transpose16
#define MLAKIT_CPU_HAVE_GEMM_BF16 1
#endif

namespace mlakit {
namespace cpu {

#ifdef MLAKIT_CPU_HAVE_GEMM_BF16
namespace {

#define MLAKIT_GEMM_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))

constexpr int kPanel = kGemmPanel;  // columns per packed panel (4 vectors)
constexpr int kMR = 6;            // rows per micro-kernel call
constexpr int kRowChunk = 192;    // rows per work item
constexpr int kPanelGroup = 4;    // panels per work item

// C[0:MR][0:64 of the panel] over k / 2 pairs; `cols` (<= 64) columns stored.
template <int MR>
MLAKIT_GEMM_TARGET void micro(const uint16_t* a, int64_t lda, const uint32_t* panel, int64_t pairs,
                              uint16_t* c, int64_t ldc, int cols) {
  __m512 acc[MR][4];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_setzero_ps();
  const uint32_t* ar[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) ar[i] = reinterpret_cast<const uint32_t*>(a + i * lda);
  for (int64_t x = 0; x < pairs; ++x) {
    const uint32_t* bp = panel + x * kPanel;
    __m512 b[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) b[v] = _mm512_load_ps(reinterpret_cast<const float*>(bp + 16 * v));
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(ar[i][x])));
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], (__m512bh)av, (__m512bh)b[v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    uint16_t* cr = c + i * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const int left = cols - 16 * v;
      if (left <= 0) break;
      const __mmask16 m = first_lanes16(left);
      _mm256_mask_storeu_epi16(cr + 16 * v, m, (__m256i)_mm512_cvtneps_pbh(acc[i][v]));
    }
  }
}

// Panel p of B: columns [64p, 64p + 64) (zero past n), all k / 2 pairs: blocks of 16 columns x 16
// pairs transposed in registers (element by element, packing took a large part of a call at
// small m).
MLAKIT_GEMM_TARGET void pack_panel(const uint16_t* b, int64_t ldb, int64_t n, int64_t pairs, int64_t p, uint32_t* out) {
  for (int g = 0; g < kPanel; g += 16) {
    for (int64_t x0 = 0; x0 < pairs; x0 += 16) {
      const __mmask16 m = first_lanes16(pairs - x0);
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t col = p * kPanel + g + i;
        r[i] = col < n ? _mm512_maskz_loadu_epi32(m, b + col * ldb + 2 * x0) : _mm512_setzero_si512();
      }
      bf16_parts::transpose16(r);
      for (int i = 0; i < std::min<int64_t>(16, pairs - x0); ++i) _mm512_store_si512(out + (x0 + i) * kPanel + g, r[i]);
    }
  }
}

}  // namespace

bool gemm_nt_bf16_available(int64_t k) {
  return k % 2 == 0 && cpu_isa_in_use() != CpuIsa::kFp32 && cpu_isa_available(CpuIsa::kAvx512Bf16);
}

void gemm_nt_bf16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
                  int64_t ldb, uint16_t* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const int64_t pairs = k / 2;
  const int64_t panels = (n + kPanel - 1) / kPanel;
  thread_local AlignedScratch<uint32_t> packed;
  uint32_t* bp = packed.ensure(static_cast<size_t>(panels * pairs * kPanel));
  const int threads = run_threads();
  parallel_for(panels, threads, [&](int64_t p) { pack_panel(b, ldb, n, pairs, p, bp + p * pairs * kPanel); });
  if (gemm_amx_takes(k)) {
    gemm_panels_amx(m, n, k, a, lda, bp, c, ldc);
    return;
  }

  const int64_t row_chunks = (m + kRowChunk - 1) / kRowChunk;
  const int64_t groups = (panels + kPanelGroup - 1) / kPanelGroup;
  parallel_for(row_chunks * groups, threads, [&](int64_t item) {
    const int64_t r_begin = (item / groups) * kRowChunk, r_end = std::min(m, r_begin + kRowChunk);
    const int64_t p_begin = (item % groups) * kPanelGroup, p_end = std::min(panels, p_begin + kPanelGroup);
    for (int64_t p = p_begin; p < p_end; ++p) {
      const uint32_t* panel = bp + p * pairs * kPanel;
      const int cols = static_cast<int>(std::min<int64_t>(kPanel, n - p * kPanel));
      for (int64_t r = r_begin; r < r_end; r += kMR) {
        const uint16_t* ar = a + r * lda;
        uint16_t* cr = c + r * ldc + p * kPanel;
        switch (std::min<int64_t>(kMR, r_end - r)) {
          case 1: micro<1>(ar, lda, panel, pairs, cr, ldc, cols); break;
          case 2: micro<2>(ar, lda, panel, pairs, cr, ldc, cols); break;
          case 3: micro<3>(ar, lda, panel, pairs, cr, ldc, cols); break;
          case 4: micro<4>(ar, lda, panel, pairs, cr, ldc, cols); break;
          case 5: micro<5>(ar, lda, panel, pairs, cr, ldc, cols); break;
          default: micro<kMR>(ar, lda, panel, pairs, cr, ldc, cols); break;
        }
      }
    }
  });
}

#else  // not x86-64 GCC/Clang: never available

bool gemm_nt_bf16_available(int64_t) { return false; }
void gemm_nt_bf16(int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, uint16_t*,
                  int64_t) {}

#endif

}  // namespace cpu
}  // namespace mlakit
