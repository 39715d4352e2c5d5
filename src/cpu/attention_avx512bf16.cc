// The AVX-512 BF16 path of the CPU backend: both products on VDPBF16PS (16 fp32 lanes, each a
// dot product of two bf16 pairs), fp32 accumulation, the online softmax over 16 lanes.
//
// Per item (<= 64 q rows of one head), per chunk of 64 keys:
//   S^T = K Q^T   S is computed transposed, [key][row]: a vector holds 16 rows of one key, so
//                 the softmax's per-row max and sum are lane-wise (no horizontal reductions) and
//                 K is read in place, one 32-bit (pair of dims) broadcast per key and step, from
//                 the input rows (bf16) or from rows converted once per chunk (other dtypes).
//                 Q is packed once per item as [dim pair][row] ("VNNI" pairs).
//   softmax       scale (or soft cap), mask, running max, exp2 over 16 lanes; P^T is rounded to
//                 bf16 and packed as [key pair][row]. Masking is lane-wise (compare the key index
//                 with each row's visible range); chunks every row sees whole skip it.
//   O += P V      V is packed once per run (prepare_avx512bf16) as [kv head][key pair][dim], key
//                 pairs counted from each sequence's first key, so every q tile and head that
//                 reads a chunk shares its packing (packing per item cost 8% of a long run). O's
//                 rows are rescaled as they are loaded into the accumulators, and only where some
//                 row's max moved. Chunks start at even keys (the union's first key rounded down;
//                 the key before it is masked) so that they are whole pairs.
// Where a chunk's rows see only part of it (a causal tile's last chunk), S^T is computed only for
// the row vectors that see each block of keys, and P V only over the key pairs each block of rows
// sees. Everything depends only on the item and the chunk position, so repeated runs are bitwise
// equal and a sequence's result does not depend on its batch.
//
// The functions carry target attributes (no file-wide -m flags), so the library stays one binary
// for every x86-64 CPU; cpu_isa.h decides at run time whether this path may run.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/aligned_scratch.h"
#include "cpu/attention_item.h"
#include "cpu/avx512bf16_parts.h"
#include "cpu/avx512bf16_products.h"
#include "cpu/thread_pool.h"

namespace mlakit {
namespace cpu {

#ifdef MLAKIT_CPU_HAVE_AVX512BF16_PATH
namespace {

using namespace bf16_parts;

struct Scratch {
  AlignedScratch<uint32_t> qpack;  // [dim pair][kRows]
  AlignedScratch<uint16_t> kconv;  // [kChunk][2 * dim pairs]: converted key rows (when not read in place)
  AlignedScratch<uint16_t> zero;   // a zero key row for the keys past a chunk's end
  AlignedScratch<float> st;        // [kChunk + kKeyBlock][kRows]: S^T, then the scaled logits
  AlignedScratch<uint32_t> ppair;  // [kChunk / 2][kRows]: P^T as bf16 pairs of keys
  AlignedScratch<float> o;         // [kRows][dvp]
  RowState rs;
};

MLAKIT_BF16_TARGET void run_item_impl(const Problem& p, const ItemRows& it, Scratch& w) {
  const PackedV& pv = *static_cast<const PackedV*>(p.prepared);
  const int rows = it.rows;
  const int nvr = (rows + 15) / 16;  // row vectors
  const int dqk = p.dqk;
  const int dq2 = (dqk + 1) / 2;     // dim pairs
  const int dvp = pv.dvp;
  RowState& rs = w.rs;

  uint32_t* qpack = w.qpack.ensure(static_cast<size_t>(dq2) * kRows);
  uint16_t* zero = w.zero.ensure(static_cast<size_t>(2 * dq2));
  std::memset(zero, 0, sizeof(uint16_t) * 2 * dq2);
  float* st = w.st.ensure(static_cast<size_t>(kChunk + kKeyBlock) * kRows);
  uint32_t* ppair = w.ppair.ensure(static_cast<size_t>(kChunk / 2) * kRows);
  float* o = w.o.ensure(static_cast<size_t>(kRows) * dvp);
  std::memset(o, 0, sizeof(float) * static_cast<size_t>(nvr * 16) * dvp);

  rs.init(p, it, nvr);
  const float qk_factor = it.qk_factor(p);
  pack_q(p, it, rows, nvr, dq2, dqk % 2 != 0, qpack);

  // Keys are read in place when they are whole pairs on both sides of the split.
  const bool keys_in_place = dqk % 2 == 0 && p.dk_split % 2 == 0;
  uint16_t* kconv = keys_in_place ? nullptr : w.kconv.ensure(static_cast<size_t>(kChunk) * 2 * dq2);
  const int pa = keys_in_place ? p.dk_split / 2 : dq2;
  const int pb = keys_in_place ? (dqk - p.dk_split) / 2 : 0;
  const uint32_t* zero32 = reinterpret_cast<const uint32_t*>(zero);
  const uint32_t* ka[kChunk + kKeyBlock];
  const uint32_t* kb[kChunk + kKeyBlock];
  const uint32_t* v_seq = pv.words.data + (static_cast<size_t>(it.kv_head) * pv.total_pairs + pv.pair_base.data[it.seq]) * dvp;

  for (int64_t c0 = rs.tile_lo; c0 < rs.tile_hi; c0 += kChunk) {
    const int n = static_cast<int>(std::min<int64_t>(kChunk, rs.tile_hi - c0));
    const int nq = (n + 1) / 2;
    const int64_t tok0 = it.kv_begin + c0;
    const uint32_t* vpack = v_seq + static_cast<size_t>(c0 / 2) * dvp;

    // Key rows of the chunk.
    for (int j = 0; j < n; ++j) {
      if (keys_in_place) {
        ka[j] = static_cast<const uint32_t*>(p.k->ptr_at(tok0 + j, it.kv_head));
        kb[j] = pb > 0 ? static_cast<const uint32_t*>(p.k_rope->ptr_at(tok0 + j, it.rope_head)) : zero32;
      } else {
        uint16_t* dst = kconv + static_cast<size_t>(j) * 2 * dq2;
        const auto* ks = static_cast<const uint16_t*>(p.k->ptr_at(tok0 + j, it.kv_head));
        std::memcpy(dst, ks, sizeof(uint16_t) * p.dk_split);
        if (p.dk_split < dqk)
          std::memcpy(dst + p.dk_split, p.k_rope->ptr_at(tok0 + j, it.rope_head), sizeof(uint16_t) * (dqk - p.dk_split));
        if (dqk % 2 != 0) dst[dqk] = 0;
        ka[j] = reinterpret_cast<const uint32_t*>(dst);
        kb[j] = zero32;
      }
    }
    for (int j = n; j < round_up(n, kKeyBlock); ++j) ka[j] = kb[j] = zero32;

    // S^T for the chunk, per block of keys only for the row vectors that see one of its keys:
    // on a causal tile's last chunk that skips the keys past each vector's last row (the
    // softmax masks whatever it does not compute).
    rs.enter_chunk(c0, n, nvr);
    for (int j = 0; j < n; j += kKeyBlock) {
      int v0 = nvr, v1 = -1;
      for (int v = 0; v < nvr; ++v) {
        if (rs.vlo[v] < j + kKeyBlock && rs.vhi[v] > j) {
          v0 = std::min(v0, v);
          v1 = v;
        }
      }
      if (v1 < v0) continue;
      float* sj = st + j * kRows + 16 * v0;
      const uint32_t* qv = qpack + 16 * v0;
      switch (v1 - v0 + 1) {
        case 1: qk_block<1>(qv, ka + j, pa, kb + j, pb, sj); break;
        case 2: qk_block<2>(qv, ka + j, pa, kb + j, pb, sj); break;
        case 3: qk_block<3>(qv, ka + j, pa, kb + j, pb, sj); break;
        default: qk_block<4>(qv, ka + j, pa, kb + j, pb, sj); break;
      }
    }

    softmax_chunk(p, qk_factor, n, nvr, st, ppair, rs);

    // O += P V, kRowBlock rows x up to 4 dim vectors per call, over the key pairs those rows see.
    const int nvd = dvp / 16;
    for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
      const bool rsc = rs.rescale[r0 / 16];
      int x0 = nq, x1 = 0;
      for (int r = r0; r < r0 + kRowBlock; ++r) {
        if (rs.hi[r] <= rs.lo[r]) continue;
        x0 = std::min(x0, rs.lo[r] / 2);
        x1 = std::max(x1, (rs.hi[r] + 1) / 2);
      }
      x1 = std::max(x0, x1);
      int c = 0;
      for (; c + 4 <= nvd; c += 4)
        pv_block<4>(ppair + r0, vpack + 16 * c, dvp, x0, x1, o + r0 * dvp + 16 * c, rs.alpha + r0, rsc);
      switch (nvd - c) {
        case 1: pv_block<1>(ppair + r0, vpack + 16 * c, dvp, x0, x1, o + r0 * dvp + 16 * c, rs.alpha + r0, rsc); break;
        case 2: pv_block<2>(ppair + r0, vpack + 16 * c, dvp, x0, x1, o + r0 * dvp + 16 * c, rs.alpha + r0, rsc); break;
        case 3: pv_block<3>(ppair + r0, vpack + 16 * c, dvp, x0, x1, o + r0 * dvp + 16 * c, rs.alpha + r0, rsc); break;
        default: break;
      }
    }
  }

  store_rows(p, it, rs, o, dvp, it.v_factor(p));
}

}  // namespace

void prepare_avx512bf16(Problem& p) {
  thread_local PackedV packed;  // the calling thread's: it waits for every item of its run
  pack_all_v(p, packed);
  p.prepared = &packed;
}

void run_item_avx512bf16(const Problem& p, int64_t item) {
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

void prepare_avx512bf16(Problem&) {}
void run_item_avx512bf16(const Problem& p, int64_t item) { run_item_fp32<DType::kBF16>(p, item); }

#endif

}  // namespace cpu
}  // namespace mlakit
