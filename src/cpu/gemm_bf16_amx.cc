// gemm_nt_bf16 on AMX tiles. B's packed panels ([k / 2][64] pair words) are already B tiles (16
// columns x 16 pairs, rows 256 bytes apart), and A's rows are A tiles read in place (16 rows x 32
// k values per k-step). Each work item computes a block of rows x panels in blocks of 32 rows x
// 32 columns: 2 x 2 fp32 accumulator tiles over the whole k loop, stored once into a small
// buffer and rounded to bf16 there. Rows past m in a last partial block are read from a
// zero-padded copy (never past A's end).
#include "cpu/gemm_bf16_amx.h"

#include <algorithm>
#include <cstring>

#include "cpu/aligned_scratch.h"
#include "cpu/cpu_isa.h"
#include "cpu/thread_pool.h"

#if defined(__GNUC__) && defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 headers
#include <immintrin.h>

#include "cpu/amx_blocks.h"
#include "cpu/lane_mask.h"
#define MLAKIT_CPU_HAVE_GEMM_AMX 1
#endif

namespace mlakit {
namespace cpu {

#ifdef MLAKIT_CPU_HAVE_GEMM_AMX
namespace {

using namespace amx;

#define MLAKIT_GEMM_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

constexpr int kRowChunk = 192;  // rows per work item (6 blocks of 32)
constexpr int kPanelGroup = 4;  // panels per work item
static_assert(kGemmPanel * 4 == kWideRow, "a panel's row of pairs is a B tile's row");

// `rows` x `cols` of C from the fp32 buffer (rows kGemmPanel floats apart), rounded to bf16.
MLAKIT_GEMM_AMX_TARGET void store_block(const float* cbuf, int rows, int cols, uint16_t* c, int64_t ldc) {
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < cols; j += 16) {
      const __mmask16 m = first_lanes16(cols - j);
      const __m512 v = _mm512_load_ps(cbuf + i * kGemmPanel + j);
      _mm256_mask_storeu_epi16(c + i * ldc + j, m, (__m256i)_mm512_cvtneps_pbh(v));
    }
  }
}

// Columns [32h, 32h + 32) of the panel for rows a0.. (RA tiles of 16), over k / 32 k-steps, into
// the buffer's columns [32h, 32h + 32).
template <int RA, int CB>
void block(const char* a, int64_t a_stride, const char* panel, int h, int64_t ksteps, float* cbuf) {
  c_zero<RA, CB>();
  const char* b = panel + 128 * h;  // 32 columns of pair words further
  for (int64_t s = 0; s < ksteps; ++s)
    k_step<RA, CB>(a + 64 * s, a + 16 * a_stride + 64 * s, a_stride, b + s * 16 * kWideRow);
  c_store<RA, CB>(reinterpret_cast<char*>(cbuf + 32 * h), 16 * kWideRow);
}

struct Scratch {
  AlignedScratch<uint16_t> arows;  // [32][k]: a last partial block's rows, zero-padded
  AlignedScratch<float> cbuf;      // [32][kGemmPanel]
};

// Panel by panel, each half panel (32 columns: 32 KB of B at k = 512, kept in L1) over all the
// item's rows in blocks of 32 (A from L2).
void run_item(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint32_t* panels,
              uint16_t* c, int64_t ldc, int64_t r_begin, int64_t r_end, int64_t p_begin, int64_t p_end) {
  thread_local Scratch w;
  float* cbuf = w.cbuf.ensure(32 * kGemmPanel);
  const int64_t pairs = k / 2, ksteps = k / 32;
  // The last block of rows is read from a zero-padded copy where its tiles would reach past A's
  // last row.
  const int64_t last = r_begin + (r_end - r_begin - 1) / 32 * 32;
  const int last_rows = static_cast<int>(r_end - last);
  const uint16_t* last_copy = nullptr;
  if (last + 16 * (last_rows > 16 ? 2 : 1) > m) {
    uint16_t* copy = w.arows.ensure(static_cast<size_t>(32) * k);
    std::memset(copy, 0, sizeof(uint16_t) * 32 * k);
    for (int i = 0; i < last_rows; ++i) std::memcpy(copy + i * k, a + (last + i) * lda, sizeof(uint16_t) * k);
    last_copy = copy;
  }
  tile_config();
  for (int64_t p = p_begin; p < p_end; ++p) {
    const char* panel = reinterpret_cast<const char*>(panels + p * pairs * kGemmPanel);
    const int cols = static_cast<int>(std::min<int64_t>(kGemmPanel, n - p * kGemmPanel));
    for (int h = 0; h < 2 && 32 * h < cols; ++h) {
      const bool two = 32 * h + 16 < cols;
      for (int64_t r = r_begin; r < r_end; r += 32) {
        const int rows = static_cast<int>(std::min<int64_t>(32, r_end - r));
        const bool copied = r == last && last_copy != nullptr;
        const char* ar = reinterpret_cast<const char*>(copied ? last_copy : a + r * lda);
        const int64_t a_stride = copied ? k * 2 : lda * 2;
        if (rows > 16) {
          if (two) block<2, 2>(ar, a_stride, panel, h, ksteps, cbuf);
          else block<2, 1>(ar, a_stride, panel, h, ksteps, cbuf);
        } else {
          if (two) block<1, 2>(ar, a_stride, panel, h, ksteps, cbuf);
          else block<1, 1>(ar, a_stride, panel, h, ksteps, cbuf);
        }
        store_block(cbuf + 32 * h, rows, std::min(32, cols - 32 * h), c + r * ldc + p * kGemmPanel + 32 * h, ldc);
      }
    }
  }
  tile_release();
}

}  // namespace

bool gemm_amx_takes(int64_t k) { return k % 32 == 0 && cpu_isa_in_use() == CpuIsa::kAmx; }

void gemm_panels_amx(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint32_t* panels,
                     uint16_t* c, int64_t ldc) {
  const int64_t panel_count = (n + kGemmPanel - 1) / kGemmPanel;
  const int64_t row_chunks = (m + kRowChunk - 1) / kRowChunk;
  const int64_t groups = (panel_count + kPanelGroup - 1) / kPanelGroup;
  parallel_for(row_chunks * groups, run_threads(), [&](int64_t item) {
    const int64_t r_begin = (item / groups) * kRowChunk, r_end = std::min(m, r_begin + kRowChunk);
    const int64_t p_begin = (item % groups) * kPanelGroup, p_end = std::min(panel_count, p_begin + kPanelGroup);
    run_item(m, n, k, a, lda, panels, c, ldc, r_begin, r_end, p_begin, p_end);
  });
}

#else  // not x86-64 GCC/Clang: never taken

bool gemm_amx_takes(int64_t) { return false; }
void gemm_panels_amx(int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint32_t*, uint16_t*, int64_t) {}

#endif

}  // namespace cpu
}  // namespace mlakit
