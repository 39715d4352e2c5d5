// The fp32 path of latent attention on the CPU (every CPU; fp16 inputs everywhere, since rounded
// to bf16 they would lose their precision): per item, its q rows widened to fp32 once
// (pre-scaled into base-2 logits), then its keys in chunks of 64: the chunk's cache rows widened
// once, K transposed and V (the rows' first L columns) row-major, so that S = Q K^T and O += P V
// are the fp32 path's small matrix products (cpu/gemm_fp32.h); the online softmax per row.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/gemm_fp32.h"
#include "cpu/half_convert.h"
#include "cpu/latent_item.h"
#include "cpu/softmax_row_f32.h"

namespace mlakit {
namespace cpu {
namespace latent_cpu {

namespace {

constexpr int kChunk = 64;

int round_up(int x, int a) { return (x + a - 1) / a * a; }

struct Scratch {
  std::vector<float> q, kt, v, s, o, m, l;
  std::vector<int32_t> lo, hi;  // each row's visible keys in the current chunk
  std::vector<int64_t> row_lo, row_hi;
  std::vector<uint16_t> dec;  // fp8_ds_mla: the key's row decoded
  const void* keys[kChunk];
};

// One chunk of n keys (w.keys), each row seeing [w.lo[r], w.hi[r]) of them.
template <DType D>
void chunk(const Run& run, int rows, int mp, int n, Scratch& w) {
  using E = Elem<D>;
  const int Dm = run.D, L = run.L, np = round_up(n, 8);
  float* kt = w.kt.data();
  float* vf = w.v.data();
  if (run.fp8_rows) w.dec.resize(static_cast<size_t>(Dm));
  for (int j = 0; j < n; ++j) {
    const uint16_t* row = static_cast<const uint16_t*>(w.keys[j]);
    if (run.fp8_rows) {
      decode_fp8_row(run, row, w.dec.data());
      row = w.dec.data();
    }
    for (int d = 0; d < Dm; ++d) kt[static_cast<size_t>(d) * kChunk + j] = E::load(row[d]);
    float* vd = vf + static_cast<size_t>(j) * L;
    for (int d = 0; d < L; ++d) vd[d] = E::load(row[d]);
  }
  for (int d = 0; d < Dm; ++d)
    for (int j = n; j < np; ++j) kt[static_cast<size_t>(d) * kChunk + j] = 0.0f;
  gemm_f32(mp, np, Dm, w.q.data(), Dm, kt, kChunk, w.s.data(), kChunk, /*accumulate=*/false);
  for (int r = 0; r < mp; ++r) {
    float* srow = w.s.data() + static_cast<size_t>(r) * kChunk;
    const int ja = r < rows ? w.lo[r] : 0, jb = r < rows ? w.hi[r] : 0;
    if (ja >= jb) {
      std::fill(srow, srow + n, 0.0f);
      continue;
    }
    softmax_row_f32(srow, n, ja, jb, w.m[r], w.l[r], w.o.data() + static_cast<size_t>(r) * L, L);
  }
  gemm_f32(mp, L, n, w.s.data(), kChunk, vf, L, w.o.data(), L, /*accumulate=*/true);
}

}  // namespace

template <DType D>
void item_fp32(const Run& run, const LatentItem& it) {
  thread_local Scratch w;
  using E = Elem<D>;
  const int rows = it.rows, mp = round_up(rows, 4), Dm = run.D, L = run.L;
  w.q.assign(static_cast<size_t>(mp) * Dm, 0.0f);
  w.kt.resize(static_cast<size_t>(Dm) * kChunk);
  w.v.resize(static_cast<size_t>(kChunk) * L);
  w.s.resize(static_cast<size_t>(mp) * kChunk);
  w.o.assign(static_cast<size_t>(mp) * L, 0.0f);
  w.m.assign(static_cast<size_t>(mp), kNegInf);
  w.l.assign(static_cast<size_t>(mp), 0.0f);
  w.lo.resize(static_cast<size_t>(mp));
  w.hi.resize(static_cast<size_t>(mp));
  w.row_lo.resize(static_cast<size_t>(mp));
  w.row_hi.resize(static_cast<size_t>(mp));

  // q rows in fp32, scaled so that the product gives base-2 logits.
  const float qs = run.h->sm_scale_log2;
  for (int r = 0; r < rows; ++r) {
    const int64_t g = it.row_begin + r;
    const uint16_t* nope = run.q_nope(g);
    const uint16_t* pe = run.q_rope(g);
    float* dst = w.q.data() + static_cast<size_t>(r) * Dm;
    for (int d = 0; d < L; ++d) dst[d] = E::load(nope[d]) * qs;
    for (int d = 0; d < run.R; ++d) dst[L + d] = E::load(pe[d]) * qs;
  }

  if (run.h->sparse) {
    // The item's valid entries in order, 64 at a time; every row sees all of them.
    const int64_t end = run.entry_end(it);
    int n = 0;
    for (int64_t e = it.key_begin; e <= end; ++e) {
      const void* row = e < end ? run.entry_row(it.request, it.token, e) : nullptr;
      if (row != nullptr) w.keys[n++] = row;
      if (n == kChunk || (e == end && n > 0)) {
        for (int r = 0; r < rows; ++r) {
          w.lo[r] = 0;
          w.hi[r] = n;
        }
        chunk<D>(run, rows, mp, n, w);
        n = 0;
      }
    }
  } else {
    int64_t tile_lo = it.key_begin, tile_hi = it.key_begin;
    for (int r = 0; r < rows; ++r) {
      run.dense_range(it, it.row_begin + r, &w.row_lo[r], &w.row_hi[r]);
      tile_hi = std::max(tile_hi, w.row_hi[r]);
    }
    for (int64_t c0 = tile_lo; c0 < tile_hi; c0 += kChunk) {
      const int n = static_cast<int>(std::min<int64_t>(kChunk, tile_hi - c0));
      for (int j = 0; j < n; ++j) w.keys[j] = run.key_row(it.request, c0 + j);
      for (int r = 0; r < rows; ++r) {
        w.lo[r] = static_cast<int32_t>(std::clamp<int64_t>(w.row_lo[r] - c0, 0, n));
        w.hi[r] = static_cast<int32_t>(std::clamp<int64_t>(w.row_hi[r] - c0, 0, n));
      }
      chunk<D>(run, rows, mp, n, w);
    }
  }
  // This path's running max is the exact max of the row's base-2 logits.
  for (int r = 0; r < rows; ++r)
    finish_row(run, it, r, w.o.data() + static_cast<size_t>(r) * L, w.m[r], w.l[r], w.m[r] * kLn2F);
}

template void item_fp32<DType::kBF16>(const Run&, const LatentItem&);
template void item_fp32<DType::kFP16>(const Run&, const LatentItem&);

}  // namespace latent_cpu
}  // namespace cpu
}  // namespace mlakit
