// merge_states: combine two partial attentions over disjoint key sets by their LSE.
#include <cstdint>

#include "bindings.h"
#include "mlakit/merge.h"
#include "tensor_arg.h"

namespace mlakit_py {

void bind_merge(nb::module_& m) {
  m.def(
      "merge_states",
      [](nb::handle out_a, nb::handle lse_a, nb::handle out_b, nb::handle lse_b, nb::handle out,
         nb::handle lse_out, nb::handle stream) {
        // out / lse_out may alias out_a / lse_a (in place), so the inputs are imported read-only
        // and the outputs writable; both imports see the same memory.
        TensorArg ta = tensor_arg(out_a, "out_a", false), la = tensor_arg(lse_a, "lse_a", false),
                  tb = tensor_arg(out_b, "out_b", false), lb = tensor_arg(lse_b, "lse_b", false),
                  to = tensor_arg(out, "out", true);
        std::optional<TensorArg> lo = optional_tensor_arg(lse_out, "lse_out", true);
        mlakit::Stream s = stream_arg(stream, ta);
        nb::gil_scoped_release release;
        mlakit::merge_states(ta.view, la.view, tb.view, lb.view, to.view, lo ? &lo->view : nullptr, s);
      },
      nb::arg("out_a").none(), nb::arg("lse_a").none(), nb::arg("out_b").none(), nb::arg("lse_b").none(), nb::arg("out").none(),
      nb::arg("lse_out").none(), nb::arg("stream").none());
}

}  // namespace mlakit_py
