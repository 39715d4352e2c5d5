// PrefillOptions, bound once: plan(), ragged_prefill() and reference_prefill() all take this
// object, so the option surface (names, defaults, checks) has one definition in the bindings.
// Values are checked by the C++ library when a call uses them (mlakit::Error names the field).
#include <string>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "mlakit/prefill.h"

namespace mlakit_py {

void bind_options(nb::module_& m) {
  using O = mlakit::PrefillOptions;
  nb::class_<O>(m, "PrefillOptions", "Masking and scaling options of a plan (mlakit::PrefillOptions).")
      .def(
          "__init__",
          [](O* self, bool causal, float sm_scale, int window_left, float logits_soft_cap) {
            new (self) O{causal, sm_scale, window_left, logits_soft_cap};
          },
          nb::kw_only(), nb::arg("causal") = false, nb::arg("sm_scale") = 0.0f, nb::arg("window_left") = -1,
          nb::arg("logits_soft_cap") = 0.0f)
      .def_rw("causal", &O::causal, "bottom-right aligned causal mask")
      .def_rw("sm_scale", &O::sm_scale, "softmax scale; 0 = 1/sqrt(head_dim_qk)")
      .def_rw("window_left", &O::window_left, "keys to the left of the diagonal; -1 = no window")
      .def_rw("logits_soft_cap", &O::logits_soft_cap, "c > 0: s = c*tanh(s/c); 0 = off")
      .def("__eq__", [](const O& a, const O& b) {
        return a.causal == b.causal && a.sm_scale == b.sm_scale && a.window_left == b.window_left &&
               a.logits_soft_cap == b.logits_soft_cap;
      })
      .def("__repr__", [](const O& o) {
        return std::string("PrefillOptions(causal=") + (o.causal ? "True" : "False") +
               ", sm_scale=" + std::to_string(o.sm_scale) + ", window_left=" + std::to_string(o.window_left) +
               ", logits_soft_cap=" + std::to_string(o.logits_soft_cap) + ")";
      });
}

}  // namespace mlakit_py
