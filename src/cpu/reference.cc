// The float64 reference. Deliberately plain: one query row at a time, scores over the row's
// visible keys, two-pass softmax (max, then exponentials), everything in double. Being obviously
// right matters more than speed; the one concession is that rows, which are independent, are
// spread over threads (each row's arithmetic is the same sequential loop, so the result does not
// depend on the thread count). The GPU tests spend most of their time here.
#include "mlakit/reference.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "cpu/e4m3_convert.h"
#include "cpu/half_convert.h"
#include "cpu/reference_values.h"
#include "mlakit/error.h"
#include "plan/validate.h"

namespace mlakit {
namespace reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double load(const void* p, DType t) {
  if (t == DType::kE4M3) return cpu::e4m3_to_float(*static_cast<const uint8_t*>(p));
  return load_real(p, t);
}

// Descale factor [b, h] (1 when absent), in double.
double factor(const TensorView* d, int64_t b, int64_t h) {
  return d == nullptr ? 1.0 : static_cast<double>(*static_cast<const float*>(d->ptr_at(b, h)));
}

// Exact for every value that `load` can produce from the same dtype, so pass-through is
// bit-exact.
void store(void* p, DType t, double x) {
  switch (t) {
    case DType::kBF16: *static_cast<uint16_t*>(p) = cpu::float_to_bf16(static_cast<float>(x)); break;
    case DType::kFP16: *static_cast<uint16_t*>(p) = cpu::float_to_fp16(static_cast<float>(x)); break;
    case DType::kFP32: *static_cast<float*>(p) = static_cast<float>(x); break;
    case DType::kFP64: *static_cast<double*>(p) = x; break;
    default: throw Error(ErrorKind::kTypeMismatch, "", "reference: not a floating dtype");
  }
}

const char* elem(const TensorView& t, int64_t i0, int64_t i1, int64_t i2) {
  return static_cast<const char*>(t.ptr_at(i0, i1, i2));
}

// Visible keys [lo, hi) of query i in a sequence (lq, lk), straight from the rules in
// mlakit/prefill.h: causal keeps j <= lk - lq + i, a window keeps j >= lk - lq + i - w.
void visible_keys(int64_t i, int64_t lq, int64_t lk, const PrefillOptions& o, int64_t* lo,
                  int64_t* hi) {
  const int64_t diag = lk - lq + i;
  *lo = o.window_left >= 0 ? std::max<int64_t>(0, diag - o.window_left) : 0;
  *hi = o.causal ? std::min<int64_t>(lk, diag + 1) : lk;
  if (*hi < *lo) *hi = *lo;
}

// One row, no validation (callers have validated). `seq` owns q_row.
void row(const TensorView& q, const TensorView& k, const TensorView& v, const int32_t* qo_indptr,
         const int32_t* kv_indptr, int seq, const PrefillOptions& options, int64_t q_row, int head,
         double* out_row, double* lse_out, const Descales& descales) {
  const int64_t dqk = q.shape[2], dvo = v.shape[2];
  const int64_t group = q.shape[1] / k.shape[1];
  const int64_t kv_head = head / group;
  const int64_t lq = qo_indptr[seq + 1] - qo_indptr[seq];
  const int64_t lk = kv_indptr[seq + 1] - kv_indptr[seq];
  const int64_t kv0 = kv_indptr[seq];
  int64_t lo, hi;
  visible_keys(q_row - qo_indptr[seq], lq, lk, options, &lo, &hi);

  for (int64_t d = 0; d < dvo; ++d) out_row[d] = 0.0;
  if (hi <= lo) {
    if (lse_out) *lse_out = kNegInf;
    return;
  }
  const double scale = options.sm_scale != 0.0f ? static_cast<double>(options.sm_scale)
                                                 : 1.0 / std::sqrt(static_cast<double>(dqk));
  const double cap = options.logits_soft_cap;
  // FP8 descales: the scores of the dequantized q and k, the output of the dequantized v.
  const double qk_factor = factor(descales.q, seq, kv_head) * factor(descales.k, seq, kv_head);
  const double v_factor = factor(descales.v, seq, kv_head);
  std::vector<double> qv(dqk);
  const size_t qs = dtype_size(q.dtype), ks = dtype_size(k.dtype), vs = dtype_size(v.dtype);
  for (int64_t d = 0; d < dqk; ++d) qv[d] = load(elem(q, q_row, head, 0) + d * qs, q.dtype);

  // Pass 1: scores and their max.
  std::vector<double> s(hi - lo);
  double mx = kNegInf;
  for (int64_t j = lo; j < hi; ++j) {
    const char* kr = elem(k, kv0 + j, kv_head, 0);
    double dot = 0.0;
    for (int64_t d = 0; d < dqk; ++d) dot += qv[d] * load(kr + d * ks, k.dtype);
    double x = dot * qk_factor * scale;
    if (cap > 0.0) x = cap * std::tanh(x / cap);
    s[j - lo] = x;
    mx = std::max(mx, x);
  }
  // Pass 2: exponentials, weighted sum of V.
  double sum = 0.0;
  for (int64_t j = lo; j < hi; ++j) {
    const double p = std::exp(s[j - lo] - mx);
    sum += p;
    const char* vr = elem(v, kv0 + j, kv_head, 0);
    for (int64_t d = 0; d < dvo; ++d) out_row[d] += p * load(vr + d * vs, v.dtype);
  }
  for (int64_t d = 0; d < dvo; ++d) out_row[d] = out_row[d] * v_factor / sum;
  if (lse_out) *lse_out = mx + std::log(sum);
}

plan::TensorRules reference_rules() {
  plan::TensorRules r;
  r.out_matches_input_dtype = false;
  r.allow_fp32_fp64_inputs = true;
  r.need_16B_alignment = false;
  return r;
}

}  // namespace

void attention_row(const TensorView& q, const TensorView& k, const TensorView& v,
                   const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                   const PrefillOptions& options, int64_t q_row, int head, double* out_row,
                   double* lse_out) {
  attention_row(q, k, v, qo_indptr, kv_indptr, batch_size, options, q_row, head, out_row, lse_out, Descales{});
}

void attention_row(const TensorView& q, const TensorView& k, const TensorView& v,
                   const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                   const PrefillOptions& options, int64_t q_row, int head, double* out_row,
                   double* lse_out, const Descales& descales) {
  const plan::IndptrTotals totals = plan::validate_indptr(qo_indptr, kv_indptr, batch_size);
  plan::validate_options(options);
  // The shared tensor checks want an output; a view of the right shape stands in for it (its
  // pointer is never used: the result goes to out_row).
  TensorView fake_out(q.data, DType::kFP64, {q.shape[0], q.shape[1], v.shape[2]});
  fake_out.device = q.device;
  plan::validate_prefill_tensors(q, k, v, fake_out, nullptr, totals, reference_rules());
  plan::require_device(q, "q", Device::cpu());  // the reference reads host memory only
  plan::validate_descales(descales, q.dtype, Device::cpu(), batch_size, k.shape[1]);
  if (q_row < 0 || q_row >= totals.total_q) {
    throw Error(ErrorKind::kInvalidArgument, "q_row",
                "row " + std::to_string(q_row) + " is outside [0, " +
                    std::to_string(totals.total_q) + ")");
  }
  if (head < 0 || head >= q.shape[1]) {
    throw Error(ErrorKind::kInvalidArgument, "head",
                "head " + std::to_string(head) + " is outside [0, " + std::to_string(q.shape[1]) +
                    ")");
  }
  if (out_row == nullptr) throw Error(ErrorKind::kInvalidArgument, "out_row", "is null");
  // The owning sequence: the last b with qo_indptr[b] <= q_row (empty sequences are skipped
  // because upper_bound lands past them).
  const int seq = static_cast<int>(
      std::upper_bound(qo_indptr, qo_indptr + batch_size + 1, static_cast<int32_t>(q_row)) -
      qo_indptr - 1);
  row(q, k, v, qo_indptr, kv_indptr, seq, options, q_row, head, out_row, lse_out, descales);
}

void ragged_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                    const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                    const PrefillOptions& options, const TensorView& out, const TensorView* lse) {
  ragged_prefill(q, k, v, qo_indptr, kv_indptr, batch_size, options, out, lse, Descales{});
}

void ragged_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                    const int32_t* qo_indptr, const int32_t* kv_indptr, int batch_size,
                    const PrefillOptions& options, const TensorView& out, const TensorView* lse,
                    const Descales& descales) {
  const plan::IndptrTotals totals = plan::validate_indptr(qo_indptr, kv_indptr, batch_size);
  plan::validate_options(options);
  plan::validate_prefill_tensors(q, k, v, out, lse, totals, reference_rules());
  plan::require_device(q, "q", Device::cpu());  // the reference reads host memory only
  plan::validate_descales(descales, q.dtype, Device::cpu(), batch_size, k.shape[1]);

  const int64_t heads = q.shape[1], dvo = v.shape[2];
  const size_t os = dtype_size(out.dtype);
  // Rows [r0, r1) of the batch, every head; each (row, head) writes only its own output.
  auto rows = [&](int64_t r0, int64_t r1) {
    std::vector<double> o(dvo);
    int b = static_cast<int>(std::upper_bound(qo_indptr, qo_indptr + batch_size + 1, static_cast<int32_t>(r0)) -
                             qo_indptr - 1);
    for (int64_t r = r0; r < r1; ++r) {
      while (r >= qo_indptr[b + 1]) ++b;  // skips empty sequences too
      for (int64_t h = 0; h < heads; ++h) {
        double l = 0.0;
        row(q, k, v, qo_indptr, kv_indptr, b, options, r, static_cast<int>(h), o.data(), &l, descales);
        char* dst = static_cast<char*>(out.ptr_at(r, h));
        for (int64_t d = 0; d < dvo; ++d) store(dst + d * os, out.dtype, o[d]);
        if (lse != nullptr) store(lse->ptr_at(r, h), lse->dtype, l);
      }
    }
  };
  const int64_t total = totals.total_q;
  const int64_t hw = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t threads = std::min<int64_t>({hw, 64, std::max<int64_t>(1, total * heads / 64)});
  if (threads <= 1) {
    rows(0, total);
    return;
  }
  // Interleaved chunks of rows, so long rows at the end of causal sequences are shared out.
  const int64_t chunk = 16;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (int64_t r0 = t * chunk; r0 < total; r0 += threads * chunk) rows(r0, std::min(total, r0 + chunk));
      } catch (...) {
        errors[static_cast<size_t>(t)] = std::current_exception();
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

void merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                  const TensorView& lse_b, const TensorView& out, const TensorView* lse_out) {
  plan::validate_merge_tensors(out_a, lse_a, out_b, lse_b, out, lse_out, /*allow_fp64=*/true);
  plan::require_device(out_a, "out_a", Device::cpu());
  const int64_t n = out.shape[0], heads = out.shape[1], dim = out.shape[2];
  std::vector<double> a(dim), b(dim);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      // Read everything first: out may alias out_a or out_b.
      // +inf (FlashAttention-2's lse of a row with no key) is empty, like -inf.
      const double la_raw = load(lse_a.ptr_at(t, h), lse_a.dtype);
      const double lb_raw = load(lse_b.ptr_at(t, h), lse_b.dtype);
      const double la = std::isinf(la_raw) ? kNegInf : la_raw;
      const double lb = std::isinf(lb_raw) ? kNegInf : lb_raw;
      for (int64_t d = 0; d < dim; ++d) {
        a[d] = load(elem(out_a, t, h, d), out_a.dtype);
        b[d] = load(elem(out_b, t, h, d), out_b.dtype);
      }
      double l;
      if (la == kNegInf && lb == kNegInf) {
        l = kNegInf;
        for (int64_t d = 0; d < dim; ++d) store(out.ptr_at(t, h, d), out.dtype, 0.0);
      } else if (la == kNegInf || lb == kNegInf) {
        const bool take_b = la == kNegInf;
        l = take_b ? lb : la;
        const std::vector<double>& src = take_b ? b : a;
        for (int64_t d = 0; d < dim; ++d) store(out.ptr_at(t, h, d), out.dtype, src[d]);
      } else {
        const double m = std::max(la, lb);
        const double wa = std::exp(la - m), wb = std::exp(lb - m);
        const double sum = wa + wb;
        l = m + std::log(sum);
        for (int64_t d = 0; d < dim; ++d)
          store(out.ptr_at(t, h, d), out.dtype, (a[d] * wa + b[d] * wb) / sum);
      }
      if (lse_out != nullptr) store(lse_out->ptr_at(t, h), lse_out->dtype, l);
    }
  }
}

}  // namespace reference
}  // namespace mlakit
