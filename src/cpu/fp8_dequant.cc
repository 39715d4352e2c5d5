// The CPU backend's FP8 path (fp8_dequant.h). Two ways:
//   * bf16 output on a bf16 path (avx512bf16): q, k, v decoded into bf16, which holds every e4m3
//     value exactly, and the bf16 kernel runs on them with the descales applied per item to the
//     scores and the output (Problem::descales), as the GPU kernels apply them: bf16 speed.
//   * otherwise (fp16 output, the fp32 path): decoded into float32 with the descales folded in
//     (q_descale * k_descale into q, so a shared k_rope stays shared: K is only decoded; each value
//     the e4m3 value times the factor, rounded once), the float32 kernel, one rounding to out.
#include "cpu/fp8_dequant.h"

#include <algorithm>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_isa.h"
#include "cpu/e4m3_avx512.h"
#include "cpu/lane_mask.h"
#include "cpu/e4m3_convert.h"
#include "cpu/half_convert.h"
#include "cpu/thread_pool.h"

namespace mlakit {
namespace cpu {
namespace {

// Factor [b, h] of a descale tensor, 1 when absent.
float factor(const TensorView* d, int64_t b, int64_t h) {
  return d == nullptr ? 1.0f : *static_cast<const float*>(d->ptr_at(b, h));
}

// Per-thread float32 and bf16 copies, kept between runs.
struct Buffers {
  std::vector<float> q, k, kr, v, out;
  std::vector<uint16_t> q16, k16, kr16, v16;
};

// n e4m3 codes decoded into bf16 (exact), 16 at a time.
#ifdef MLAKIT_CPU_HAVE_E4M3_AVX512
MLAKIT_E4M3_TARGET void decode_bf16(const uint8_t* x, int64_t n, uint16_t* y) {
  for (int64_t d = 0; d < n; d += 16) {
    const int64_t left = n - d;
    const __mmask16 m = first_lanes16(left);
    _mm256_mask_storeu_epi16(y + d, m, e4m3_to_bf16_x16(_mm_maskz_loadu_epi8(m, x + d)));
  }
}
#else
void decode_bf16(const uint8_t* x, int64_t n, uint16_t* y) {
  for (int64_t d = 0; d < n; ++d) y[d] = float_to_bf16(e4m3_to_float(x[d]));
}
#endif

// Rows [begin[b], begin[b + 1]) of `src` (e4m3 [rows, heads, width]) decoded into bf16 (exact).
// Only called on a bf16 path, so AVX-512 is there.
void decode_rows_bf16(const TensorView& src, const int32_t* begin, int batch, std::vector<uint16_t>& dst) {
  const int64_t heads = src.shape[1], width = src.shape[2];
  const int64_t rows = begin[batch];
  dst.resize(static_cast<size_t>(std::max<int64_t>(rows * heads * width, 1)));
  uint16_t* out = dst.data();
  // The sequences' rows are [0, begin[batch]): blocks of 64 rows, so one long sequence uses every
  // thread too.
  constexpr int64_t kBlock = 64;
  parallel_for((rows + kBlock - 1) / kBlock, run_threads(), [&](int64_t blk) {
    for (int64_t r = blk * kBlock; r < std::min(rows, (blk + 1) * kBlock); ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        decode_bf16(static_cast<const uint8_t*>(src.ptr_at(r, h)), width, out + (r * heads + h) * width);
      }
    }
  });
}

// Rows [begin[b], begin[b + 1]) of `src` (e4m3 [rows, heads, width]) decoded into dst
// ([rows, heads, width] contiguous), each (row, head) scaled by scale(b, head).
template <class Scale>
void decode_rows(const TensorView& src, const int32_t* begin, int batch, std::vector<float>& dst, Scale scale) {
  const int64_t heads = src.shape[1], width = src.shape[2];
  const int64_t rows = begin[batch];
  dst.resize(static_cast<size_t>(std::max<int64_t>(rows * heads * width, 1)));
  float* out = dst.data();
  parallel_for(batch, pool_size(), [&](int64_t b) {
    for (int64_t r = begin[b]; r < begin[b + 1]; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        const float s = scale(b, h);
        const uint8_t* x = static_cast<const uint8_t*>(src.ptr_at(r, h));
        float* y = out + (r * heads + h) * width;
        for (int64_t d = 0; d < width; ++d) y[d] = e4m3_to_float(x[d]) * s;
      }
    }
  });
}

TensorView dense(std::vector<float>& buf, int64_t rows, int64_t heads, int64_t width) {
  return TensorView(buf.data(), DType::kFP32, {rows, heads, width});
}

TensorView dense(std::vector<uint16_t>& buf, int64_t rows, int64_t heads, int64_t width) {
  return TensorView(buf.data(), DType::kBF16, {rows, heads, width});
}

}  // namespace

void run_prefill_e4m3(const plan::ScheduleHeader& header, const int32_t* qo_indptr, const int32_t* kv_indptr,
                      const plan::WorkTile* tiles, const TensorView& q, const TensorView& k,
                      const TensorView* k_rope, const TensorView& v, const TensorView& out, const TensorView* lse,
                      const Descales& descales) {
  thread_local Buffers buf;
  const int batch = header.batch_size;
  const int64_t total_q = qo_indptr[batch], total_kv = kv_indptr[batch];
  const int64_t H = q.shape[1], Hkv = k.shape[1], group = H / Hkv;
  const int64_t dqk = q.shape[2], dk = k.shape[2], dvo = v.shape[2];

  if (products_isa(DType::kE4M3, out.dtype, cpu_isa_in_use()) != CpuIsa::kFp32) {  // a bf16 output on a bf16 path
    decode_rows_bf16(q, qo_indptr, batch, buf.q16);
    decode_rows_bf16(k, kv_indptr, batch, buf.k16);
    decode_rows_bf16(v, kv_indptr, batch, buf.v16);
    TensorView kr16;
    if (k_rope != nullptr) {
      decode_rows_bf16(*k_rope, kv_indptr, batch, buf.kr16);
      kr16 = dense(buf.kr16, total_kv, k_rope->shape[1], k_rope->shape[2]);
    }
    run_prefill(header, qo_indptr, kv_indptr, tiles, dense(buf.q16, total_q, H, dqk), dense(buf.k16, total_kv, Hkv, dk),
                k_rope != nullptr ? &kr16 : nullptr, dense(buf.v16, total_kv, Hkv, dvo), out, lse, &descales);
    return;
  }

  decode_rows(q, qo_indptr, batch, buf.q, [&](int64_t b, int64_t h) {
    return factor(descales.q, b, h / group) * factor(descales.k, b, h / group);
  });
  decode_rows(k, kv_indptr, batch, buf.k, [](int64_t, int64_t) { return 1.0f; });
  decode_rows(v, kv_indptr, batch, buf.v, [&](int64_t b, int64_t h) { return factor(descales.v, b, h); });
  const TensorView q32 = dense(buf.q, total_q, H, dqk);
  const TensorView k32 = dense(buf.k, total_kv, Hkv, dk);
  const TensorView v32 = dense(buf.v, total_kv, Hkv, dvo);
  TensorView kr32;
  if (k_rope != nullptr) {
    decode_rows(*k_rope, kv_indptr, batch, buf.kr, [](int64_t, int64_t) { return 1.0f; });
    kr32 = dense(buf.kr, total_kv, k_rope->shape[1], k_rope->shape[2]);
  }
  buf.out.resize(static_cast<size_t>(std::max<int64_t>(total_q * H * dvo, 1)));
  const TensorView out32 = dense(buf.out, total_q, H, dvo);
  run_prefill(header, qo_indptr, kv_indptr, tiles, q32, k32, k_rope != nullptr ? &kr32 : nullptr, v32, out32, lse);

  // One rounding into the output dtype, as the kernel's own store would do.
  const bool bf16 = out.dtype == DType::kBF16;
  const float* src = buf.out.data();
  parallel_for(total_q, pool_size(), [&](int64_t t) {
    for (int64_t h = 0; h < H; ++h) {
      uint16_t* dst = static_cast<uint16_t*>(out.ptr_at(t, h));
      const float* x = src + (t * H + h) * dvo;
      for (int64_t d = 0; d < dvo; ++d) dst[d] = bf16 ? float_to_bf16(x[d]) : float_to_fp16(x[d]);
    }
  });
}

}  // namespace cpu
}  // namespace mlakit
