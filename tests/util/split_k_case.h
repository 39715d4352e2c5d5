// A split-K attention problem laid out as MLA produces it: per-head K "nope" and V interleaved in
// one up-projection output [T_kv, Hkv, Dn + Dvo], the shared RoPE key in the last R columns of a
// latent row [T_kv, latent_width]. Also the same K concatenated per head ([T_kv, Hkv, Dn + R]),
// for the plain path and the float64 reference.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "mlakit/tensor.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {

struct SplitKProblem {
  int heads = 0, kv_heads = 0, dn = 0, rope = 0, dvo = 0, latent_width = 0;
  std::vector<int32_t> qo, kv;
  HostTensor q;       // [Tq, H, Dn + R]
  HostTensor kv_buf;  // [Tk, Hkv, Dn + Dvo]
  HostTensor latent;  // [Tk, latent_width], RoPE key in the last R columns
  HostTensor k_full;  // [Tk, Hkv, Dn + R]
  HostTensor v;       // [Tk, Hkv, Dvo] (a contiguous copy of kv_buf's V part)
  int batch() const { return static_cast<int>(qo.size()) - 1; }
  int dqk() const { return dn + rope; }
};

inline SplitKProblem make_split_k_problem(DType t, int heads, int kv_heads, int dn, int rope, int dvo,
                                          int latent_width, const std::vector<int32_t>& q_lens,
                                          const std::vector<int32_t>& kv_lens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  SplitKProblem p;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.dn = dn;
  p.rope = rope;
  p.dvo = dvo;
  p.latent_width = latent_width;
  p.qo = make_indptr(q_lens);
  p.kv = make_indptr(kv_lens);
  const int64_t tq = p.qo.back(), tk = p.kv.back();
  p.q = HostTensor(t, {tq, heads, dn + rope});
  p.kv_buf = HostTensor(t, {tk, kv_heads, dn + dvo});
  p.latent = HostTensor(t, {tk, latent_width});
  p.q.fill_normal(rng);
  p.kv_buf.fill_normal(rng);
  p.latent.fill_normal(rng);
  p.k_full = HostTensor(t, {tk, kv_heads, dn + rope});
  p.v = HostTensor(t, {tk, kv_heads, dvo});
  for (int64_t j = 0; j < tk; ++j) {
    for (int h = 0; h < kv_heads; ++h) {
      const int64_t src = (j * kv_heads + h) * (dn + dvo);
      const int64_t dst = (j * kv_heads + h) * (dn + rope);
      for (int d = 0; d < dn; ++d) p.k_full.set(dst + d, p.kv_buf.get(src + d));
      for (int d = 0; d < rope; ++d) p.k_full.set(dst + dn + d, p.latent.get(j * latent_width + latent_width - rope + d));
      for (int d = 0; d < dvo; ++d) p.v.set((j * kv_heads + h) * dvo + d, p.kv_buf.get(src + dn + d));
    }
  }
  return p;
}

// K "nope" and V as strided views of a [Tk, Hkv, Dn + Dvo] buffer (host or device view).
inline TensorView k_part(TensorView kv_buf, int dn) {
  kv_buf.shape[2] = dn;
  return kv_buf;
}
inline TensorView v_part(TensorView kv_buf, int dn, int dvo) {
  const size_t es = dtype_size(kv_buf.dtype);
  kv_buf.data = static_cast<char*>(kv_buf.data) + dn * es;
  kv_buf.shape[2] = dvo;
  return kv_buf;
}
// The shared RoPE key [Tk, R]: the last R columns of a [Tk, latent_width] view.
inline TensorView rope_part(TensorView latent, int rope) {
  const size_t es = dtype_size(latent.dtype);
  latent.data = static_cast<char*>(latent.data) + (latent.shape[1] - rope) * es;
  latent.shape[1] = rope;
  return latent;
}

}  // namespace test
}  // namespace mlakit
