// Small shared pieces of the Python backend: errors as values at the C ABI, Triton's error
// codes, the server log, and Python error texts.
//
// Threads: the functions that take a pybind11 object need the GIL; the others do not.
#ifndef VRAMD_BACKENDS_PYTHON_COMMON_H_
#define VRAMD_BACKENDS_PYTHON_COMMON_H_

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "vramd/backend.h"

namespace vramd::python {

namespace py = pybind11;

// Thrown by the backend's own C++ code called from Python; pybind11 raises it as
// c_python_backend_utils.TritonModelException (Triton's PythonBackendException).
class ModelException : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Triton's TRITONSERVER_Error_Code numbering, as TritonError.code() returns it.
enum TritonCode : int {
  kTritonUnknown = 0,
  kTritonInternal = 1,
  kTritonNotFound = 2,
  kTritonInvalidArg = 3,
  kTritonUnavailable = 4,
  kTritonUnsupported = 5,
  kTritonAlreadyExists = 6,
  kTritonCancelled = 7,
};
VramdCode CodeFromTriton(int triton_code);
int TritonFromCode(VramdCode code);

// Writes `message` into `error`; a message longer than the buffer keeps its tail (where a
// Python traceback names the error), marked with a leading "...".
void SetError(VramdError* error, const std::string& message);

void Log(const VramdServerApi* server, VramdLogLevel level, const std::string& text);

// str() of an object's type, e.g. "<class 'list'>" (Triton's error texts). Needs the GIL.
std::string TypeName(py::handle object);

// "<Type>: <message>" of a Python error (Triton's error_already_set::what() without the
// traceback). Needs the GIL.
std::string ErrorText(const py::error_already_set& error);
// The whole traceback, as traceback.format_exception writes it. Needs the GIL.
std::string TracebackText(const py::error_already_set& error);

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_COMMON_H_
