// The MLA step's GPU tests' shared parts: a device copy of an MlaCase's layer tensors (outputs
// NaN-poisoned; the cache in its format, kFp8's scale), reading results back, and the check of
// a step's rows against the float64 reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "mlakit/mlakit.h"
#include "util/mla_case.h"
#include "util/test_util.h"

namespace mlakit {
namespace test {

struct DeviceLayer {
  std::unique_ptr<DeviceTensor> q, kv_c, k_pe, w, cache, out, lse, k_scale;
  KvCacheDtype format = KvCacheDtype::kAuto;
  DeviceLayer(const MlaCase& m, Device d) : format(m.cfg.kv_cache_dtype) {
    q = std::make_unique<DeviceTensor>(m.q, d);
    kv_c = std::make_unique<DeviceTensor>(m.kv_c, d);
    k_pe = std::make_unique<DeviceTensor>(m.k_pe, d);
    w = std::make_unique<DeviceTensor>(m.w, d);
    cache = std::make_unique<DeviceTensor>(m.cache, d);
    if (format == KvCacheDtype::kFp8) k_scale = std::make_unique<DeviceTensor>(m.k_scale, d);
    HostTensor o(m.cfg.dtype, {m.q.shape()[0], m.cfg.num_heads, m.cfg.v_head_dim});
    HostTensor l(DType::kFP32, {m.q.shape()[0], m.cfg.num_heads});
    o.fill_bytes(0xFF);
    l.fill_bytes(0xFF);
    out = std::make_unique<DeviceTensor>(o, d);
    lse = std::make_unique<DeviceTensor>(l, d);
  }
  MlaLayer layer() const {
    MlaLayer y{q->view(), kv_c->view(), k_pe->view(), w->view(), cache->view()};
    if (k_scale) y.k_scale = k_scale->view();
    return y;
  }
};

// d's tensors over a cache the caller owns (and never resets between steps).
inline MlaLayer layer_over(const DeviceLayer& d, const DeviceTensor& cache) {
  MlaLayer y = d.layer();
  y.kv_cache = cache.view();
  return y;
}

// Host data of a case into the same device buffers (a graph keeps reading them).
inline void upload(const HostTensor& h, const DeviceTensor& d) {
  copy_bytes(d.view().data, d.view().device, h.data(), Device::cpu(), h.nbytes());
}

struct Fetched {
  HostTensor out, lse, cache;
};

inline Fetched fetch(const DeviceLayer& d, const MlaCase& m) {
  Fetched f{HostTensor(m.cfg.dtype, {m.q.shape()[0], m.cfg.num_heads, m.cfg.v_head_dim}),
            HostTensor(DType::kFP32, {m.q.shape()[0], m.cfg.num_heads}), HostTensor(m.cache.dtype(), m.cache.shape())};
  d.out->copy_to(f.out);
  d.lse->copy_to(f.lse);
  d.cache->copy_to(f.cache);
  return f;
}

// Rows [0, total_q) written and within bf16 tolerance of the reference.
inline void expect_matches(const Fetched& f, const MlaCase& m, const MlaRef& ref) {
  expect_step_rows(f.out, f.lse, m, ref.out.to_doubles(), ref.lse.to_doubles());
}

}  // namespace test
}  // namespace mlakit
