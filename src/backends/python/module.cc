// The embedded module c_python_backend_utils: what triton_python_backend_utils.py takes its C
// names from (Triton's PYBIND11_EMBEDDED_MODULE in pb_stub.cc).
#include <pybind11/embed.h>

#include "common.h"
#include "pb_tensor.h"
#include "py_types.h"

PYBIND11_EMBEDDED_MODULE(c_python_backend_utils, m) {
  namespace py = pybind11;
  using namespace vramd::python;
  // First, so that BindTensor raises the same TritonModelException.
  py::register_exception<ModelException>(m, "TritonModelException");
  BindTensor(m);
  BindInferTypes(m);
  BindBls(m);
  BindServices(m);
}
