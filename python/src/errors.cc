// One translation from the C++ error convention to Python exceptions, with the message unchanged
// so that Python users see exactly what C++ users see ("mlakit: q: ...").
#include <Python.h>

#include <string>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "mlakit/error.h"

namespace mlakit_py {

static PyObject* python_type_for(mlakit::ErrorKind kind) {
  switch (kind) {
    case mlakit::ErrorKind::kInvalidArgument:
    case mlakit::ErrorKind::kUnsupported:
      return PyExc_ValueError;
    case mlakit::ErrorKind::kTypeMismatch:
      return PyExc_TypeError;
    case mlakit::ErrorKind::kRuntime:
    default:
      return PyExc_RuntimeError;
  }
}

void bind_errors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const mlakit::Error& e) {
      PyErr_SetString(python_type_for(e.kind()), e.what());
    }
  });
  // Exposed so tests and tools can check which Python type each kind maps to.
  m.def("_error_type_for_kind", [](int kind) {
    return nb::borrow<nb::object>(python_type_for(static_cast<mlakit::ErrorKind>(kind)));
  });
  m.def("_raise_for_kind", [](int kind, const std::string& argument, const std::string& message) {
    throw mlakit::Error(static_cast<mlakit::ErrorKind>(kind), argument, message);
  }, "Throws mlakit::Error(kind, argument, message) from C++ (tests the translation).");
}

}  // namespace mlakit_py
