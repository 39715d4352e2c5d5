// The tile work of the amx attention (attention_amx.cc) as streams of k-steps that the softmax
// issues between its exponentials (its pump() hook, avx512bf16_parts.h), so that the tile unit
// and the vector units work at the same time. While the softmax of chunk c runs, the pump issues
// O^T += V^T P^T of chunk c - 1 (PvStream), then S^T = K Q^T of chunk c + 1 (QkStream), spread
// evenly over the softmax's pairs of exponentials, and prefetches into L2 the keys of chunk c + 2
// and V^T of chunk c + 1 (Prefetch). One stream's blocks keep their accumulators in tmm0..3 from
// their first k-step to their last, so the streams run one after the other, never interleaved.
#pragma once

#include <cstdint>

#include "cpu/amx_blocks.h"
#include "cpu/avx512bf16_parts.h"

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH

namespace mlakit {
namespace cpu {
namespace amx {

using bf16_parts::kRows;

constexpr int kAmxChunk = 128;  // keys per chunk
constexpr int kKStep = 32;      // bf16 per tile row: dims of S^T's k-steps, keys of O's
constexpr int kKeyTiles = kAmxChunk / kTileRows;
constexpr int kMaxDimTiles = 512 / 16;  // head dims up to cpu::kMaxHeadDim
static_assert(kWideRow == kRows * 4, "qpack, ppair, S^T and O^T have kRows words per row");

// Where a key tile's 16 rows are read: the first `sa` k-steps from `a` (the k part), the rest from
// `b` (k_rope), rows `a_stride` / `b_stride` bytes apart.
struct KeyTile {
  const char* a;
  const char* b;
  int64_t a_stride, b_stride;
  int sa;
  bool copied;  // from the zero-padded copy
};

// S^T of one chunk as blocks of up to 2 key tiles x 2 row tiles, each over `ksteps` k-steps (C
// zeroed before the first, stored into st after the last).
struct QkStream {
  struct Block {
    int8_t kt0, nk, v0, nv;  // key tiles [kt0, kt0 + nk), row tiles [v0, v0 + nv)
  };
  KeyTile kt[kKeyTiles];
  Block blocks[kKeyTiles * (kRows / 32)];  // at most one per key tile and pair of row tiles
  int nblocks = 0, ksteps = 0, cur = 0, s = 0;
  const char* qpack = nullptr;
  float* st = nullptr;

  bool done() const { return cur >= nblocks; }
  int steps_left() const { return (nblocks - cur) * ksteps - s; }

  template <int RA, int CB>
  MLAKIT_BF16_INLINE void step_shape(const Block& bl) {
    if (s == 0) c_zero<RA, CB>();
    const KeyTile& k0 = kt[bl.kt0];
    const KeyTile& k1 = kt[bl.kt0 + RA - 1];
    // Both key tiles of a block are read in place or both from the copy (attention_amx.cc's
    // chunk_keys), so they have the same strides and switch to k_rope at the same k-step.
    const bool first = s < k0.sa;
    const int64_t off = 64 * static_cast<int64_t>(first ? s : s - k0.sa);
    const char* b = qpack + (static_cast<int64_t>(s) * 16 * kRows + 16 * bl.v0) * 4;
    k_step<RA, CB>((first ? k0.a : k0.b) + off, (first ? k1.a : k1.b) + off, first ? k0.a_stride : k0.b_stride, b);
    if (++s == ksteps) {
      c_store<RA, CB>(reinterpret_cast<char*>(st + (bl.kt0 * kTileRows) * kRows + 16 * bl.v0), kTileRows * kWideRow);
      s = 0;
      ++cur;
    }
  }

  MLAKIT_BF16_INLINE void step() {
    const Block& bl = blocks[cur];
    switch (bl.nk * 2 + bl.nv) {
      case 3: step_shape<1, 1>(bl); break;
      case 4: step_shape<1, 2>(bl); break;
      case 5: step_shape<2, 1>(bl); break;
      default: step_shape<2, 2>(bl); break;
    }
  }
};

// O^T += V^T P^T of one chunk as blocks of up to 2 dim tiles x 2 row tiles, each over the k-steps
// (32 keys) its rows see (C loaded from O^T before the first, stored back after the last).
struct PvStream {
  struct Block {
    int8_t t0, nt, v0, nv, s0, s1;  // dim tiles, row tiles, k-steps [s0, s1)
  };
  Block blocks[(kMaxDimTiles / 2) * (kRows / 32)];
  int nblocks = 0, cur = 0, s = 0;
  const char* vt = nullptr;     // V^T of the chunk: [k-step][dvp][32 keys] bf16
  const char* ppair = nullptr;  // P^T of the chunk
  float* ot = nullptr;
  int64_t a_block = 0;          // bytes of V^T per k-step

  bool done() const { return cur >= nblocks; }
  int steps_left() const {
    int n = 0;
    for (int i = cur; i < nblocks; ++i) n += blocks[i].s1 - blocks[i].s0;
    return n - (cur < nblocks ? s - blocks[cur].s0 : 0);
  }

  template <int RA, int CB>
  MLAKIT_BF16_INLINE void step_shape(const Block& bl) {
    char* c = reinterpret_cast<char*>(ot + static_cast<int64_t>(bl.t0) * 16 * kRows + 16 * bl.v0);
    if (s == bl.s0) c_load<RA, CB>(c, 16 * kWideRow);
    const char* a = vt + s * a_block + static_cast<int64_t>(bl.t0) * 16 * 64;
    k_step<RA, CB>(a, a + 16 * 64, 64, ppair + static_cast<int64_t>(s) * 16 * kWideRow + 64 * bl.v0);
    if (++s == bl.s1) {
      c_store<RA, CB>(c, 16 * kWideRow);
      if (++cur < nblocks) s = blocks[cur].s0;
    }
  }

  MLAKIT_BF16_INLINE void step() {
    const Block& bl = blocks[cur];
    switch (bl.nt * 2 + bl.nv) {
      case 3: step_shape<1, 1>(bl); break;
      case 4: step_shape<1, 2>(bl); break;
      case 5: step_shape<2, 1>(bl); break;
      default: step_shape<2, 2>(bl); break;
    }
  }
};

// Rows of cache lines to bring into L2 ahead of their tile loads: up to kSegments runs of `rows`
// rows `stride` bytes apart, `lines` cache lines each.
struct Prefetch {
  static constexpr int kSegments = 3;
  struct Segment {
    const char* base;
    int64_t stride;
    int rows, lines;
  };
  Segment seg[kSegments];
  int nseg = 0, cur = 0, row = 0, line = 0;

  void clear() { nseg = cur = row = line = 0; }
  void add(const char* base, int64_t stride, int rows, int lines) {
    if (rows > 0 && lines > 0) seg[nseg++] = Segment{base, stride, rows, lines};
  }
  int lines_left() const {
    int n = 0;
    for (int i = cur; i < nseg; ++i) n += seg[i].rows * seg[i].lines;
    return n - (cur < nseg ? row * seg[cur].lines + line : 0);
  }
  MLAKIT_BF16_INLINE void step() {
    if (cur >= nseg) return;
    const Segment& g = seg[cur];
    _mm_prefetch(g.base + g.stride * row + 64 * line, _MM_HINT_T1);
    if (++line == g.lines) {
      line = 0;
      if (++row == g.rows) {
        row = 0;
        ++cur;
      }
    }
  }
};

// The softmax's pump(): spreads `steps` k-steps (PV first, then S^T) and `lines` prefetches
// evenly over the `calls` calls the softmax will make (Bresenham); what is left when it returns
// is drained by the caller.
struct TilePump {
  PvStream* pv;
  QkStream* qk;
  Prefetch* pf;
  int calls, steps, lines;
  int step_credit = 0, line_credit = 0;

  MLAKIT_BF16_INLINE void operator()() {
    step_credit += steps;
    while (step_credit >= calls) {
      step_credit -= calls;
      if (!pv->done()) pv->step();
      else if (!qk->done()) qk->step();
    }
    line_credit += lines;
    while (line_credit >= calls) {
      line_credit -= calls;
      pf->step();
    }
  }

  MLAKIT_BF16_TARGET void drain() {
    while (!pv->done()) pv->step();
    while (!qk->done()) qk->step();
  }
};

}  // namespace amx
}  // namespace cpu
}  // namespace mlakit

#endif  // MLAKIT_CPU_HAVE_AVX512BF16_PATH
