// The module c_python_backend_utils: what triton_python_backend_utils.py takes its C names
// from (Triton's PYBIND11_EMBEDDED_MODULE in pb_stub.cc). Registered as a built-in by
// StartInterpreter (PyImport_AppendInittab before the interpreter starts) rather than by
// PYBIND11_EMBEDDED_MODULE's static initializer, which aborts the process when the library is
// loaded where an interpreter already runs.
#include "module.h"

#include "common.h"
#include "pb_tensor.h"
#include "py_types.h"

namespace vramd::python {

PyObject* InitUtilsModule() {
  static PyModuleDef definition{};
  try {
    py::module_ m =
        py::module_::create_extension_module("c_python_backend_utils", nullptr, &definition);
    // First, so that BindTensor raises the same TritonModelException.
    py::register_exception<ModelException>(m, "TritonModelException");
    BindTensor(m);
    BindInferTypes(m);
    BindBls(m);
    BindServices(m);
    return m.release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_ImportError, e.what());
    return nullptr;
  }
}

}  // namespace vramd::python
