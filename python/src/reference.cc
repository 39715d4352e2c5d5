// The float64 reference (host only), exposed so Python tests check the backends against exactly
// what the C++ tests use.
#include <cstdint>
#include <vector>

#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "mlakit/error.h"
#include "mlakit/reference.h"
#include "tensor_arg.h"

namespace mlakit_py {

void bind_reference(nb::module_& m) {
  m.def(
      "reference_prefill",
      [](nb::handle q, nb::handle k, nb::handle v, nb::handle qo_indptr, nb::handle kv_indptr,
         const mlakit::PrefillOptions& options, nb::handle out, nb::handle lse, nb::handle q_descale,
         nb::handle k_descale, nb::handle v_descale) {
        std::vector<int32_t> qo = host_indptr(qo_indptr, "qo_indptr");
        std::vector<int32_t> kv = host_indptr(kv_indptr, "kv_indptr");
        if (qo.empty() || kv.size() != qo.size())
          throw mlakit::Error(mlakit::ErrorKind::kInvalidArgument, "kv_indptr",
                              "qo_indptr and kv_indptr must both have batch_size + 1 >= 1 entries");
        TensorArg tq = tensor_arg(q, "q", false), tk = tensor_arg(k, "k", false), tv = tensor_arg(v, "v", false),
                  to = tensor_arg(out, "out", true);
        std::optional<TensorArg> tl = optional_tensor_arg(lse, "lse", true);
        // e4m3 inputs' descale factors (host float32 [>= batch, Hkv]; None = 1).
        std::optional<TensorArg> dq = optional_tensor_arg(q_descale, "q_descale", false),
                                 dk = optional_tensor_arg(k_descale, "k_descale", false),
                                 dv = optional_tensor_arg(v_descale, "v_descale", false);
        mlakit::Descales d;
        d.q = dq ? &dq->view : nullptr;
        d.k = dk ? &dk->view : nullptr;
        d.v = dv ? &dv->view : nullptr;
        nb::gil_scoped_release release;
        mlakit::reference::ragged_prefill(tq.view, tk.view, tv.view, qo.data(), kv.data(),
                                          static_cast<int>(qo.size() - 1), options, to.view,
                                          tl ? &tl->view : nullptr, d);
      },
      nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(), nb::arg("qo_indptr").none(),
      nb::arg("kv_indptr").none(), nb::arg("options"), nb::arg("out").none(), nb::arg("lse").none(),
      nb::arg("q_descale").none() = nb::none(), nb::arg("k_descale").none() = nb::none(),
      nb::arg("v_descale").none() = nb::none());

  m.def(
      "reference_merge_states",
      [](nb::handle out_a, nb::handle lse_a, nb::handle out_b, nb::handle lse_b, nb::handle out,
         nb::handle lse_out) {
        TensorArg ta = tensor_arg(out_a, "out_a", false), la = tensor_arg(lse_a, "lse_a", false),
                  tb = tensor_arg(out_b, "out_b", false), lb = tensor_arg(lse_b, "lse_b", false),
                  to = tensor_arg(out, "out", true);
        std::optional<TensorArg> lo = optional_tensor_arg(lse_out, "lse_out", true);
        nb::gil_scoped_release release;
        mlakit::reference::merge_states(ta.view, la.view, tb.view, lb.view, to.view, lo ? &lo->view : nullptr);
      },
      nb::arg("out_a").none(), nb::arg("lse_a").none(), nb::arg("out_b").none(), nb::arg("lse_b").none(), nb::arg("out").none(),
      nb::arg("lse_out").none());
}

}  // namespace mlakit_py
