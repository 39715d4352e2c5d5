// CPU merge of two partial attention states by their LSE, fp32 math.
// Each (token, head) row is read completely before it is written, so out may alias out_a or
// out_b (and lse_out may alias lse_a or lse_b). A side whose lse is -inf (or +inf, as
// FlashAttention-2 writes it) holds no keys: the other side is copied through bit for bit; both
// empty gives 0 and -inf.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/half_convert.h"
#include "cpu/thread_pool.h"

namespace mlakit {
namespace cpu {
namespace {

template <DType D>
void merge_row(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
               const TensorView& lse_b, const TensorView& out, const TensorView* lse_out,
               int64_t n, int64_t h) {
  using E = Elem<D>;
  using T = typename E::T;
  const int64_t dim = out.shape[2];
  const T* a = static_cast<const T*>(out_a.ptr_at(n, h));
  const T* b = static_cast<const T*>(out_b.ptr_at(n, h));
  T* o = static_cast<T*>(out.ptr_at(n, h));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // +inf is FlashAttention-2's lse for a row with no key: empty, like -inf.
  auto lse_at = [&](const TensorView& t) {
    const float x = *static_cast<const float*>(t.ptr_at(n, h));
    return std::isinf(x) ? kNegInf : x;
  };
  const float la = lse_at(lse_a);
  const float lb = lse_at(lse_b);
  float l;
  if (la == kNegInf && lb == kNegInf) {
    for (int64_t d = 0; d < dim; ++d) o[d] = E::store(0.0f);
    l = kNegInf;
  } else if (la == kNegInf) {
    if (o != b) std::memmove(o, b, sizeof(T) * dim);
    l = lb;
  } else if (lb == kNegInf) {
    if (o != a) std::memmove(o, a, sizeof(T) * dim);
    l = la;
  } else {
    const float m = std::max(la, lb);
    const float wa = std::exp(la - m);
    const float wb = std::exp(lb - m);
    const float sum = wa + wb;
    const float sa = wa / sum, sb = wb / sum;
    for (int64_t d = 0; d < dim; ++d) o[d] = E::store(E::load(a[d]) * sa + E::load(b[d]) * sb);
    l = m + std::log(sum);
  }
  if (lse_out != nullptr) *static_cast<float*>(lse_out->ptr_at(n, h)) = l;
}

template <DType D>
void merge_all(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
               const TensorView& lse_b, const TensorView& out, const TensorView* lse_out) {
  const int64_t tokens = out.shape[0], heads = out.shape[1];
  // Chunks of whole tokens; small merges run on the calling thread only.
  const int64_t work = tokens * heads * std::max<int64_t>(out.shape[2], 1);
  const int64_t chunk = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, heads * out.shape[2]));
  const int64_t chunks = (tokens + chunk - 1) / chunk;
  const int threads = work < (1 << 16) ? 1 : run_threads();
  parallel_for(chunks, threads, [&](int64_t c) {
    const int64_t t_end = std::min(tokens, (c + 1) * chunk);
    for (int64_t t = c * chunk; t < t_end; ++t)
      for (int64_t h = 0; h < heads; ++h)
        merge_row<D>(out_a, lse_a, out_b, lse_b, out, lse_out, t, h);
  });
}

}  // namespace

void merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                  const TensorView& lse_b, const TensorView& out, const TensorView* lse_out) {
  if (lse_out != nullptr && lse_out->data == nullptr) lse_out = nullptr;
  switch (out.dtype) {
    case DType::kBF16: merge_all<DType::kBF16>(out_a, lse_a, out_b, lse_b, out, lse_out); break;
    case DType::kFP16: merge_all<DType::kFP16>(out_a, lse_a, out_b, lse_b, out, lse_out); break;
    case DType::kFP32: merge_all<DType::kFP32>(out_a, lse_a, out_b, lse_b, out, lse_out); break;
    default: break;  // validated by the caller
  }
}

}  // namespace cpu
}  // namespace mlakit
