// The amx path of the CPU backend: both products on AMX tiles (TDPBF16PS: a 16 x 16 fp32 tile
// += 16 x 32 bf16 times 32 x 16 bf16, 16384 FLOP per instruction), the online softmax on AVX-512
// (avx512bf16_parts.h, shared with the avx512bf16 path), fp32 accumulation.
//
// Per item (<= 64 q rows of one head), per chunk of up to 128 keys (from a multiple of 32):
//   S^T = K Q^T   C tiles [16 keys][16 rows] fp32, stored into S^T ([key][row]: the layout the
//                 shared softmax reads, lane = row). A = K read in place (16 key rows, 32 dims per
//                 k-step, from k then from k_rope under split K); B = Q in its pair packing
//                 ([dim pair][row] words: exactly a B tile). Keys past the sequence's last, and
//                 head dims that are not whole k-steps on each side of the split, come from a
//                 zero-padded copy instead.
//   softmax       the shared one; it writes P^T as bf16 key pairs [key pair][row]: a B tile.
//   O^T += V^T P^T C tiles [16 dims][16 rows]: O is kept transposed, so P^T is the B operand as
//                 the softmax wrote it (no transposition per chunk), rows are lanes (the rescale
//                 by exp2(m_old - m_new) is a lane-wise multiply), and A = V^T, packed once per
//                 run (prepare_amx) as [kv head][block of 32 keys][dim][32 keys]: each A tile is
//                 1 KB contiguous. O^T is transposed once per item, at the store.
// Blocks of 2 x 2 C tiles (tmm0..3) with 2 A tiles (tmm4, 5) and 2 B tiles (tmm6, 7); blocks no
// row of theirs sees (a causal tile's last chunk) are skipped, and O's blocks run only over the
// k-steps their rows see. The next chunk's S^T is issued from inside this chunk's softmax, one
// k-step every few pairs of exponentials (QkStream), so that the tile unit and the vector units
// work at the same time. LDTILECFG once per item, TILERELEASE at its end.
// Everything depends only on the item and the chunk position, so repeated runs are bitwise equal
// and a sequence's result does not depend on its batch.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/aligned_scratch.h"
#include "cpu/attention_item.h"
#include "cpu/avx512bf16_parts.h"
#include "cpu/thread_pool.h"

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH
#include "cpu/amx_blocks.h"
#endif

namespace mlakit {
namespace cpu {

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH
namespace {

using namespace bf16_parts;
using namespace amx;

constexpr int kAmxChunk = 128;  // keys per chunk
constexpr int kKStep = 32;      // bf16 per tile row: dims of S^T's k-steps, keys of O's
constexpr int kKeyTiles = kAmxChunk / kTileRows;
static_assert(kWideRow == kRows * 4, "qpack, ppair, S^T and O^T have kRows words per row");

// V^T of the whole run: bf16 [kv head][block][dvp][32 keys]; block_base[s] is sequence s's first
// block of 32 keys, keys past the sequence's last are zero.
struct PackedVt {
  AlignedScratch<uint16_t> vals;
  AlignedScratch<int64_t> block_base;  // [batch + 1]
  int64_t total_blocks = 0;
  int dvp = 0;  // dvo rounded up to whole 16-dim tiles
};

// One job of pack_all_vt: one block of 32 keys of one kv head. Keys are paired (pack_v_pair),
// then 16 x 16 word blocks are transposed: a dim's 16 pairs are its 32 keys.
MLAKIT_BF16_TARGET void pack_vt_job(const Problem& p, const PackedVt& pv, int64_t job, uint32_t* pairs) {
  const int batch = p.header->batch_size;
  const int64_t* base = pv.block_base.data;
  const int h = static_cast<int>(job / pv.total_blocks);
  const int64_t y = job % pv.total_blocks;
  const int s = static_cast<int>(std::upper_bound(base, base + batch + 1, y) - base) - 1;
  const int64_t key0 = kKStep * (y - base[s]);
  const int64_t lk = p.kv_indptr[s + 1] - p.kv_indptr[s];
  const int dvp = pv.dvp;
  for (int x = 0; x < kKStep / 2; ++x) {
    const int64_t key = key0 + 2 * x;
    uint32_t* out = pairs + x * dvp;
    if (key >= lk) {
      std::memset(out, 0, sizeof(uint32_t) * dvp);
      continue;
    }
    const int64_t tok = p.kv_indptr[s] + key;
    const auto* a = static_cast<const uint16_t*>(p.v->ptr_at(tok, h));
    const auto* b = key + 1 < lk ? static_cast<const uint16_t*>(p.v->ptr_at(tok + 1, h)) : nullptr;
    pack_v_pair(a, b, p.dvo, dvp, out);
  }
  uint16_t* dst = pv.vals.data + (static_cast<size_t>(h) * pv.total_blocks + y) * dvp * kKStep;
  for (int g = 0; g < dvp; g += 16) {
    __m512i r[16];
    for (int x = 0; x < 16; ++x) r[x] = _mm512_loadu_si512(pairs + x * dvp + g);
    transpose16(r);
    for (int i = 0; i < 16; ++i) _mm512_store_si512(dst + (g + i) * kKStep, r[i]);
  }
}

void pack_all_vt(const Problem& p, PackedVt& pv) {
  const int batch = p.header->batch_size;
  pv.dvp = round_up(p.dvo, 16);
  int64_t* base = pv.block_base.ensure(static_cast<size_t>(batch) + 1);
  base[0] = 0;
  for (int b = 0; b < batch; ++b) base[b + 1] = base[b] + (p.kv_indptr[b + 1] - p.kv_indptr[b] + kKStep - 1) / kKStep;
  pv.total_blocks = base[batch];
  pv.vals.ensure(std::max<size_t>(1, static_cast<size_t>(p.num_kv_heads) * pv.total_blocks * pv.dvp * kKStep));
  parallel_for(pv.total_blocks * p.num_kv_heads, run_threads(), [&](int64_t job) {
    thread_local AlignedScratch<uint32_t> pairs;
    pack_vt_job(p, pv, job, pairs.ensure(static_cast<size_t>(kKStep / 2) * pv.dvp));
  });
}

// ---- S^T of a chunk, one k-step at a time -----------------------------------------------------

// Where a key tile's 16 rows are read: the first `sa` k-steps from `a` (the k part), the rest from
// `b` (k_rope), rows `a_stride` / `b_stride` bytes apart.
struct KeyTile {
  const char* a;
  const char* b;
  int64_t a_stride, b_stride;
  int sa;
  bool copied;  // from kconv
};

struct QkBlock {
  int8_t kt0, nk, v0, nv;  // key tiles [kt0, kt0 + nk), row tiles [v0, v0 + nv)
};

// S^T of one chunk as blocks of up to 2 key tiles x 2 row tiles, each over `ksteps` k-steps,
// issued one k-step per step() (C zeroed before the first, stored into st after the last).
struct QkStream {
  KeyTile kt[kKeyTiles];
  QkBlock blocks[kKeyTiles * (kRows / 32)];  // at most one per key tile and pair of row tiles
  int nblocks = 0, ksteps = 0, cur = 0, s = 0;
  const char* qpack = nullptr;
  float* st = nullptr;

  bool done() const { return cur >= nblocks; }
  int steps_left() const { return (nblocks - cur) * ksteps - s; }

  template <int RA, int CB>
  MLAKIT_BF16_INLINE void step_shape(const QkBlock& bl) {
    char* c = reinterpret_cast<char*>(st + (bl.kt0 * kTileRows) * kRows + 16 * bl.v0);
    const int64_t c_row = kTileRows * kWideRow;  // the next key tile
    if (s == 0) c_zero<RA, CB>();
    const KeyTile& k0 = kt[bl.kt0];
    const KeyTile& k1 = kt[bl.kt0 + RA - 1];
    // Both key tiles of a block are read in place or both from the copy (chunk_keys), so they
    // have the same strides and switch from k to k_rope at the same k-step.
    const bool first = s < k0.sa;
    const int64_t off = 64 * static_cast<int64_t>(first ? s : s - k0.sa);
    const char* a0 = (first ? k0.a : k0.b) + off;
    const char* a1 = (first ? k1.a : k1.b) + off;
    const char* b = qpack + (static_cast<int64_t>(s) * 16 * kRows + 16 * bl.v0) * 4;
    k_step<RA, CB>(a0, a1, first ? k0.a_stride : k0.b_stride, b);
    if (++s == ksteps) {
      c_store<RA, CB>(c, c_row);
      s = 0;
      ++cur;
    }
  }

  MLAKIT_BF16_INLINE void step() {
    if (done()) return;
    const QkBlock& bl = blocks[cur];
    switch (bl.nk * 2 + bl.nv) {
      case 3: step_shape<1, 1>(bl); break;
      case 4: step_shape<1, 2>(bl); break;
      case 5: step_shape<2, 1>(bl); break;
      default: step_shape<2, 2>(bl); break;
    }
  }
};

// Called by the softmax once per pair of exponentials: one k-step of the next chunk's S^T every
// `every` calls.
struct QkPump {
  QkStream* stream;
  int every, tick = 0;
  MLAKIT_BF16_INLINE void operator()() {
    if (++tick < every) return;
    tick = 0;
    stream->step();
  }
};

struct Scratch {
  AlignedScratch<uint32_t> qpack;  // [dim pair][kRows], dim pairs up to whole k-steps
  AlignedScratch<uint16_t> kconv;  // [kAmxChunk][dq32]: key rows not read in place
  AlignedScratch<float> st[2];     // [kAmxChunk][kRows]: S^T of this chunk and of the next
  AlignedScratch<uint32_t> ppair;  // [kAmxChunk / 2][kRows]: P^T as bf16 pairs of keys
  AlignedScratch<float> ot;        // [dvp][kRows]: O^T
  AlignedScratch<float> o;         // [kRows][dvp]: O, for the store
  RowState rs;
  QkStream qk;
};

struct ItemShape {
  int nvr, dq32, ksteps, dvp;
  bool keys_in_place;
};

// Each row vector's union of visible keys in the chunk [c0, c0 + n), relative to it.
void vector_ranges(const RowState& rs, int64_t c0, int n, int nvr, int* vlo, int* vhi) {
  for (int v = 0; v < nvr; ++v) {
    vlo[v] = n;
    vhi[v] = 0;
    for (int r = 16 * v; r < 16 * v + 16; ++r) {
      const int64_t lo = std::clamp<int64_t>(rs.row_lo[r] - c0, 0, n), hi = std::clamp<int64_t>(rs.row_hi[r] - c0, 0, n);
      if (hi <= lo) continue;
      vlo[v] = std::min<int>(vlo[v], static_cast<int>(lo));
      vhi[v] = std::max<int>(vhi[v], static_cast<int>(hi));
    }
  }
}

// Sets up qk to compute S^T of the chunk [c0, c0 + n) into st: where each key tile is read, and
// the blocks some row sees. Key tiles that reach past the sequence's last key, or all of them
// when the head dims are not whole k-steps on each side of the split, are copied (zero-padded)
// into kconv.
MLAKIT_BF16_TARGET void chunk_keys(const Problem& p, const ItemRows& it, const ItemShape& sh, const RowState& rs,
                                   int64_t c0, int n, Scratch& w, float* st) {
  QkStream& qk = w.qk;
  const int nkt = (n + kTileRows - 1) / kTileRows;
  const int64_t tok0 = it.kv_begin + c0;
  const int64_t k_stride = p.k->strides[0] * 2;
  const int64_t r_stride = p.k_rope != nullptr ? p.k_rope->strides[0] * 2 : 0;
  const int sa = p.dk_split / kKStep;
  for (int t = 0; t < nkt; ++t) {
    KeyTile& kt = qk.kt[t];
    const int64_t j0 = c0 + t * kTileRows;
    if (sh.keys_in_place && j0 + kTileRows <= it.lk) {
      kt.a = static_cast<const char*>(p.k->ptr_at(tok0 + t * kTileRows, it.kv_head));
      kt.a_stride = k_stride;
      kt.sa = sa;
      kt.b = p.k_rope != nullptr ? static_cast<const char*>(p.k_rope->ptr_at(tok0 + t * kTileRows, it.rope_head)) : kt.a;
      kt.b_stride = r_stride;
      kt.copied = false;
      continue;
    }
    uint16_t* dst = w.kconv.data + static_cast<size_t>(t) * kTileRows * sh.dq32;
    for (int i = 0; i < kTileRows; ++i) {
      uint16_t* row = dst + static_cast<size_t>(i) * sh.dq32;
      std::memset(row, 0, sizeof(uint16_t) * sh.dq32);
      if (j0 + i >= it.lk) continue;
      std::memcpy(row, p.k->ptr_at(tok0 + t * kTileRows + i, it.kv_head), sizeof(uint16_t) * p.dk_split);
      if (p.dk_split < p.dqk)
        std::memcpy(row + p.dk_split, p.k_rope->ptr_at(tok0 + t * kTileRows + i, it.rope_head),
                    sizeof(uint16_t) * (p.dqk - p.dk_split));
    }
    kt.a = kt.b = reinterpret_cast<const char*>(dst);
    kt.a_stride = kt.b_stride = 2 * sh.dq32;
    kt.sa = sh.ksteps;
    kt.copied = true;
  }
  // Blocks: pairs of key tiles x pairs of row tiles, only where a row of theirs sees a key of
  // theirs; a pair of key tiles where one is read in place and the other copied is split.
  int vlo[kRows / 16], vhi[kRows / 16];
  vector_ranges(rs, c0, n, sh.nvr, vlo, vhi);
  qk.nblocks = 0;
  for (int t = 0; t < nkt; t += 2) {
    int nk = std::min(2, nkt - t);
    if (nk == 2 && qk.kt[t].copied != qk.kt[t + 1].copied) nk = 1;
    for (int v = 0; v < sh.nvr; v += 2) {
      const int nv = std::min(2, sh.nvr - v);
      bool seen = false;
      for (int u = v; u < v + nv; ++u) seen |= vlo[u] < (t + nk) * kTileRows && vhi[u] > t * kTileRows;
      if (seen) qk.blocks[qk.nblocks++] = QkBlock{int8_t(t), int8_t(nk), int8_t(v), int8_t(nv)};
    }
    if (nk == 1 && t + 1 < nkt) --t;  // the split pair's second tile: its own blocks next
  }
  qk.ksteps = sh.ksteps;
  qk.cur = qk.s = 0;
  qk.qpack = reinterpret_cast<const char*>(w.qpack.data);
  qk.st = st;
}

// O^T(dims, rows 16 v0 ..) += V^T P^T over the chunk's k-steps [s0, s1), dim tiles in pairs.
template <int CB>
MLAKIT_BF16_TARGET void pv_rows(const ItemShape& sh, const uint16_t* vt, const uint32_t* ppair, int v0, int s0,
                                int s1, float* ot) {
  const int ndt = sh.dvp / 16;
  const int64_t a_block = static_cast<int64_t>(sh.dvp) * kKStep * 2;  // bytes of V^T per k-step
  for (int t = 0; t < ndt; t += 2) {
    char* c = reinterpret_cast<char*>(ot + static_cast<size_t>(t) * 16 * kRows + 16 * v0);
    const int64_t c_row = 16 * kWideRow;
    const char* a = reinterpret_cast<const char*>(vt) + static_cast<int64_t>(t) * 16 * 64;
    const char* b = reinterpret_cast<const char*>(ppair + 16 * v0);
    if (t + 1 < ndt) {
      c_load<2, CB>(c, c_row);
      for (int s = s0; s < s1; ++s)
        k_step<2, CB>(a + s * a_block, a + s * a_block + 16 * 64, 64, b + static_cast<int64_t>(s) * 16 * kWideRow);
      c_store<2, CB>(c, c_row);
    } else {
      c_load<1, CB>(c, c_row);
      for (int s = s0; s < s1; ++s) k_step<1, CB>(a + s * a_block, nullptr, 64, b + static_cast<int64_t>(s) * 16 * kWideRow);
      c_store<1, CB>(c, c_row);
    }
  }
}

// O^T's rows (lanes) of the row vectors whose max moved, times exp2(m_old - m_new).
MLAKIT_BF16_TARGET void rescale_ot(const RowState& rs, int nvr, int dvp, float* ot) {
  for (int v = 0; v < nvr; ++v) {
    if (!rs.rescale[v]) continue;
    const __m512 a = _mm512_load_ps(rs.alpha + 16 * v);
    for (int d = 0; d < dvp; ++d) {
      float* x = ot + static_cast<size_t>(d) * kRows + 16 * v;
      _mm512_store_ps(x, _mm512_mul_ps(_mm512_load_ps(x), a));
    }
  }
}

// O^T [dvp][kRows] -> O [kRows][dvp], 16 x 16 blocks transposed in registers.
MLAKIT_BF16_TARGET void transpose_out(const float* ot, int nvr, int dvp, float* o) {
  for (int v = 0; v < nvr; ++v) {
    for (int d = 0; d < dvp; d += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(ot + static_cast<size_t>(d + i) * kRows + 16 * v);
      transpose16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(o + static_cast<size_t>(16 * v + i) * dvp + d, r[i]);
    }
  }
}

// noipa: w is always the caller's thread_local scratch, and GCC would otherwise specialize this
// function on it and recompute its address (a __tls_get_addr call) inside the softmax's loop,
// spilling every vector register around it.
__attribute__((noipa)) MLAKIT_BF16_TARGET void run_item_impl(const Problem& p, const ItemRows& it, Scratch& w) {
  const PackedVt& pv = *static_cast<const PackedVt*>(p.prepared);
  ItemShape sh;
  sh.nvr = (it.rows + 15) / 16;
  sh.dq32 = round_up(p.dqk, kKStep);
  sh.ksteps = sh.dq32 / kKStep;
  sh.dvp = pv.dvp;
  sh.keys_in_place = p.dk_split % kKStep == 0 && (p.dqk - p.dk_split) % kKStep == 0;
  const int dq2 = (p.dqk + 1) / 2;
  RowState& rs = w.rs;

  uint32_t* qpack = w.qpack.ensure(static_cast<size_t>(sh.dq32 / 2) * kRows);
  w.kconv.ensure(static_cast<size_t>(kAmxChunk) * sh.dq32);
  float* st[2] = {w.st[0].ensure(static_cast<size_t>(kAmxChunk) * kRows),
                  w.st[1].ensure(static_cast<size_t>(kAmxChunk) * kRows)};
  uint32_t* ppair = w.ppair.ensure(static_cast<size_t>(kAmxChunk / 2) * kRows);
  float* ot = w.ot.ensure(static_cast<size_t>(sh.dvp) * kRows);
  float* o = w.o.ensure(static_cast<size_t>(kRows) * sh.dvp);
  for (int d = 0; d < sh.dvp; ++d) std::memset(ot + static_cast<size_t>(d) * kRows, 0, sizeof(float) * 16 * sh.nvr);

  rs.init(p, it, sh.nvr);
  const float qk_factor = it.qk_factor(p);
  pack_q(p, it, it.rows, sh.nvr, dq2, p.dqk % 2 != 0, qpack);
  // The pairs of the last k-step past the head dim multiply the copies' zero columns; they must
  // be finite: zero.
  for (int x = dq2; x < sh.dq32 / 2; ++x) std::memset(qpack + static_cast<size_t>(x) * kRows, 0, sizeof(uint32_t) * kRows);

  const int64_t first = rs.tile_lo - rs.tile_lo % kKStep;  // V^T's blocks start at multiples of 32
  const uint16_t* vt_seq =
      pv.vals.data + (static_cast<size_t>(it.kv_head) * pv.total_blocks + pv.block_base.data[it.seq]) * sh.dvp * kKStep;
  tile_config();
  if (first < rs.tile_hi) {
    chunk_keys(p, it, sh, rs, first, static_cast<int>(std::min<int64_t>(kAmxChunk, rs.tile_hi - first)), w, st[0]);
    while (!w.qk.done()) w.qk.step();
  }
  int buf = 0;
  for (int64_t c0 = first; c0 < rs.tile_hi; c0 += kAmxChunk, buf ^= 1) {
    const int n = static_cast<int>(std::min<int64_t>(kAmxChunk, rs.tile_hi - c0));
    const int nks = (n + kKStep - 1) / kKStep;
    // The next chunk's S^T, issued from inside this chunk's softmax.
    const int64_t c1 = c0 + kAmxChunk;
    if (c1 < rs.tile_hi)
      chunk_keys(p, it, sh, rs, c1, static_cast<int>(std::min<int64_t>(kAmxChunk, rs.tile_hi - c1)), w, st[buf ^ 1]);
    else
      w.qk.nblocks = w.qk.cur = 0;
    rs.enter_chunk(c0, n, sh.nvr);
    QkPump pump{&w.qk, std::max(1, sh.nvr * (n / 2) / (w.qk.steps_left() + 1))};
    softmax_chunk(p, qk_factor, n, sh.nvr, st[buf], ppair, rs, pump);
    while (!w.qk.done()) w.qk.step();

    // P^T's pairs past the chunk's keys, up to its last k-step, are zero (V^T's keys there are
    // zero or another row's; P must not be garbage).
    for (int x = (n + 1) / 2; x < nks * kKStep / 2; ++x)
      std::memset(ppair + static_cast<size_t>(x) * kRows, 0, sizeof(uint32_t) * 16 * sh.nvr);
    rescale_ot(rs, sh.nvr, sh.dvp, ot);
    const uint16_t* vt = vt_seq + static_cast<size_t>(c0 / kKStep) * sh.dvp * kKStep;
    for (int v = 0; v < sh.nvr; v += 2) {
      const int nv = std::min(2, sh.nvr - v);
      int lo = n, hi = 0;
      for (int u = v; u < v + nv; ++u) {
        if (rs.vhi[u] <= rs.vlo[u]) continue;
        lo = std::min(lo, rs.vlo[u]);
        hi = std::max(hi, rs.vhi[u]);
      }
      if (hi <= lo) continue;
      const int s0 = lo / kKStep, s1 = (hi + kKStep - 1) / kKStep;
      if (nv == 2) pv_rows<2>(sh, vt, ppair, v, s0, s1, ot);
      else pv_rows<1>(sh, vt, ppair, v, s0, s1, ot);
    }
  }
  tile_release();

  transpose_out(ot, sh.nvr, sh.dvp, o);
  store_rows(p, it, rs, o, sh.dvp, it.v_factor(p));
}

}  // namespace

void prepare_amx(Problem& p) {
  thread_local PackedVt packed;  // the calling thread's: it waits for every item of its run
  pack_all_vt(p, packed);
  p.prepared = &packed;
}

void run_item_amx(const Problem& p, int64_t item) {
  if (p.block_m > kRows) {
    run_item_fp32<DType::kBF16>(p, item);
    return;
  }
  const ItemRows it(p, item);
  if (it.rows <= 0) return;
  thread_local Scratch scratch;
  run_item_impl(p, it, scratch);
}

#else  // no x86-64 GCC/Clang: the path is never available (cpu_isa.h), this only links.

void prepare_amx(Problem&) {}
void run_item_amx(const Problem& p, int64_t item) { run_item_fp32<DType::kBF16>(p, item); }

#endif

}  // namespace cpu
}  // namespace mlakit
