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
// k-steps their rows see. While a chunk's softmax runs, it issues the last chunk's O^T += V^T P^T
// and the next chunk's S^T a k-step at a time between its exponentials (amx_streams.h), so that
// the tile unit and the vector units work at the same time; only an item's first S^T and last
// P V run alone. LDTILECFG once per item, TILERELEASE at its end.
// Everything depends only on the item and the chunk position, so repeated runs are bitwise equal
// and a sequence's result does not depend on its batch.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/aligned_scratch.h"
#include "cpu/amx_streams.h"
#include "cpu/attention_item.h"
#include "cpu/avx512bf16_parts.h"
#include "cpu/thread_pool.h"

namespace mlakit {
namespace cpu {

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH
namespace {

using namespace bf16_parts;
using namespace amx;

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

struct Scratch {
  AlignedScratch<uint32_t> qpack;     // [dim pair][kRows], dim pairs up to whole k-steps
  AlignedScratch<uint16_t> kconv;     // [kAmxChunk][dq32]: key rows not read in place
  AlignedScratch<float> st[2];        // [kAmxChunk][kRows]: S^T of this chunk and of the next
  AlignedScratch<uint32_t> ppair[2];  // [kAmxChunk / 2][kRows]: P^T (bf16 key pairs) of this chunk and the last
  AlignedScratch<float> ot;           // [dvp][kRows]: O^T
  AlignedScratch<float> o;            // [kRows][dvp]: O, for the store
  RowState rs;
  QkStream qk;
  PvStream pv;
  Prefetch pf;
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
      if (seen) qk.blocks[qk.nblocks++] = QkStream::Block{int8_t(t), int8_t(nk), int8_t(v), int8_t(nv)};
    }
    if (nk == 1 && t + 1 < nkt) --t;  // the split pair's second tile: its own blocks next
  }
  qk.ksteps = sh.ksteps;
  qk.cur = qk.s = 0;
  qk.qpack = reinterpret_cast<const char*>(w.qpack.data);
  qk.st = st;
}

// Sets up pv to add chunk c0's P V into O^T: blocks of 2 dim tiles x 2 row tiles over the
// k-steps their rows see (rs.vlo / vhi of the chunk), none where no row sees a key.
void chunk_pv(const ItemShape& sh, const RowState& rs, const uint16_t* vt, const uint32_t* ppair, int n, float* ot,
              PvStream& pv) {
  const int ndt = sh.dvp / 16;
  pv.nblocks = pv.cur = 0;
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
    for (int t = 0; t < ndt; t += 2)
      pv.blocks[pv.nblocks++] = PvStream::Block{int8_t(t), int8_t(std::min(2, ndt - t)), int8_t(v), int8_t(nv),
                                                int8_t(s0), int8_t(s1)};
  }
  pv.s = pv.nblocks > 0 ? pv.blocks[0].s0 : 0;
  pv.vt = reinterpret_cast<const char*>(vt);
  pv.ppair = reinterpret_cast<const char*>(ppair);
  pv.ot = ot;
  pv.a_block = static_cast<int64_t>(sh.dvp) * kKStep * 2;
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
  float* st[2];
  uint32_t* ppair[2];
  for (int i = 0; i < 2; ++i) {
    st[i] = w.st[i].ensure(static_cast<size_t>(kAmxChunk) * kRows);
    ppair[i] = w.ppair[i].ensure(static_cast<size_t>(kAmxChunk / 2) * kRows);
  }
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
  auto chunk_n = [&](int64_t c0) { return static_cast<int>(std::min<int64_t>(kAmxChunk, rs.tile_hi - c0)); };
  TilePump pump{&w.pv, &w.qk, &w.pf, 1, 0, 0};
  w.pv.nblocks = w.pv.cur = 0;
  tile_config();
  if (first < rs.tile_hi) {
    chunk_keys(p, it, sh, rs, first, chunk_n(first), w, st[0]);
    pump.drain();
  }
  int buf = 0;
  for (int64_t c0 = first; c0 < rs.tile_hi; c0 += kAmxChunk, buf ^= 1) {
    const int n = chunk_n(c0);
    const int nks = (n + kKStep - 1) / kKStep;
    // While this chunk's softmax runs: the last chunk's P V (set up at the end of its iteration),
    // the next chunk's S^T, and the prefetch of the keys after it and of the next chunk's V^T.
    const int64_t c1 = c0 + kAmxChunk, c2 = c1 + kAmxChunk;
    if (c1 < rs.tile_hi) chunk_keys(p, it, sh, rs, c1, chunk_n(c1), w, st[buf ^ 1]);
    else w.qk.nblocks = w.qk.cur = 0;
    w.pf.clear();
    if (c2 < rs.tile_hi && sh.keys_in_place) {
      const int64_t tok = it.kv_begin + c2;
      w.pf.add(static_cast<const char*>(p.k->ptr_at(tok, it.kv_head)), p.k->strides[0] * 2, chunk_n(c2),
               p.dk_split * 2 / 64);
      if (p.k_rope != nullptr)
        w.pf.add(static_cast<const char*>(p.k_rope->ptr_at(tok, it.rope_head)), p.k_rope->strides[0] * 2, chunk_n(c2),
                 (p.dqk - p.dk_split) * 2 / 64);
    }
    if (c1 < rs.tile_hi) {
      w.pf.add(reinterpret_cast<const char*>(vt_seq + (c1 / kKStep) * sh.dvp * kKStep), 64,
               (chunk_n(c1) + kKStep - 1) / kKStep * sh.dvp, 1);
    }
    rs.enter_chunk(c0, n, sh.nvr);
    pump.calls = std::max(1, sh.nvr * (n / 2));
    pump.steps = w.pv.steps_left() + w.qk.steps_left();
    pump.lines = w.pf.lines_left();
    pump.step_credit = pump.line_credit = 0;
    softmax_chunk(p, qk_factor, n, sh.nvr, st[buf], ppair[buf], rs, pump);
    pump.drain();

    // P^T's pairs past the chunk's keys, up to its last k-step, are zero (V^T's keys there are
    // zero or another row's; P must not be garbage).
    for (int x = (n + 1) / 2; x < nks * kKStep / 2; ++x)
      std::memset(ppair[buf] + static_cast<size_t>(x) * kRows, 0, sizeof(uint32_t) * 16 * sh.nvr);
    // O^T holds every chunk's P V before this one: rescaled to this chunk's max, it takes this
    // chunk's P V during the next softmax (or just below, after the last chunk).
    rescale_ot(rs, sh.nvr, sh.dvp, ot);
    chunk_pv(sh, rs, vt_seq + (c0 / kKStep) * sh.dvp * kKStep, ppair[buf], n, ot, w.pv);
  }
  pump.drain();
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
