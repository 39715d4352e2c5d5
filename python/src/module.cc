// Entry point of the extension. The Python package `mlakit` (python/mlakit/__init__.py) is the
// public face; this module is its private engine room and keeps argument handling minimal.
#include "bindings.h"

NB_MODULE(_mlakit, m) {
  m.doc() = "mlakit native extension (private; use the `mlakit` package).";
  mlakit_py::bind_errors(m);
  mlakit_py::bind_tensor(m);
  mlakit_py::bind_runtime(m);
  mlakit_py::bind_options(m);  // before the functions whose signatures name PrefillOptions
  mlakit_py::bind_prefill(m);
  mlakit_py::bind_merge(m);
  mlakit_py::bind_reference(m);
  mlakit_py::bind_graph(m);  // before MlaStep, whose plan() takes a StreamGraph to replay
  mlakit_py::bind_mla(m);
  mlakit_py::bind_latent(m);
}
