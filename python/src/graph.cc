// mlakit._mlakit.StreamGraph: mlakit::StreamGraph (include/mlakit/graph.h). Streams come as raw
// cudaStream_t ints (the Python wrapper resolves torch/cupy streams); the calls release the GIL
// only around the CUDA work.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "mlakit/graph.h"
#include "tensor_arg.h"

namespace mlakit_py {

void bind_graph(nb::module_& m) {
  nb::class_<mlakit::StreamGraph>(m, "StreamGraph", "A CUDA graph captured from one stream (native object).")
      .def(
          "__init__",
          [](mlakit::StreamGraph* self, const std::string& device) {
            new (self) mlakit::StreamGraph(parse_device(device, "device"));
          },
          nb::arg("device"))
      .def(
          "begin_capture", [](mlakit::StreamGraph& g, uintptr_t stream) { g.begin_capture(as_stream(stream)); },
          nb::arg("stream"))
      .def("end_capture", [](mlakit::StreamGraph& g) {
        nb::gil_scoped_release release;
        g.end_capture();
      })
      .def("abort_capture", &mlakit::StreamGraph::abort_capture)
      .def(
          "launch", [](const mlakit::StreamGraph& g, uintptr_t stream) { g.launch(as_stream(stream)); },
          nb::arg("stream"))
      .def_prop_ro("captured", &mlakit::StreamGraph::captured);
}

}  // namespace mlakit_py
