// The C++ halves of c_python_backend_utils' classes that carry data: TritonError,
// InferenceResponse, InferenceRequest (a request the model received, or one it makes: BLS),
// InferenceResponseSender, PreferredMemory and InferenceTrace. BindInferTypes (infer_types.cc)
// defines them in the module; bls.cc adds exec/async_exec and ResponseIterator.
//
// Threads: the structs are immutable after construction except where noted, so the backend
// reads them without the GIL (a response being sent).
#ifndef VRAMD_BACKENDS_PYTHON_PY_TYPES_H_
#define VRAMD_BACKENDS_PYTHON_PY_TYPES_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "pb_tensor.h"

namespace vramd::python {

class RequestState;  // request_state.h

// pb_utils.TritonError(message, code=TritonError.INTERNAL).
struct PyError {
  std::string message;
  int code = kTritonInternal;
};

// pb_utils.PreferredMemory(preferred_memory_type, preferred_device_id=0); the values are
// Triton's (pb_preferred_memory.h).
struct PreferredMemory {
  enum MemoryType { kGPU = 0, kCPU = 1, kDefault = 2 };
  MemoryType type = kDefault;
  int64_t device_id = 0;
};

// InferenceTrace: a received request's trace (request.trace()), passed on to a BLS call
// (InferenceRequest(trace=...)) to trace it as the request's child. get_context() is Triton's
// context, a JSON object {"traceparent": "00-..."}, or None when the request is not traced.
struct InferenceTrace {
  std::string traceparent;  // empty: not traced
};

// pb_utils.InferenceResponse(output_tensors=[], error=None, parameters=None).
struct PyInferResponse {
  std::vector<std::shared_ptr<PbTensor>> outputs;
  std::shared_ptr<PyError> error;  // null: none
  std::string parameters = "{}";   // a JSON object
};

// pb_utils.InferenceRequest.
struct PyInferRequest {
  std::string id;
  uint64_t correlation_id = 0;
  std::string correlation_id_string;
  bool correlation_is_string = false;
  std::vector<std::shared_ptr<PbTensor>> inputs;
  std::vector<std::string> requested_outputs;
  std::string model_name;        // BLS only
  int64_t model_version = -1;    // BLS only; -1: the highest ready
  uint32_t flags = 0;            // set_flags may change it (under the GIL)
  uint64_t timeout_us = 0;
  PreferredMemory preferred_memory;
  std::string parameters = "{}";  // a JSON object
  InferenceTrace trace;           // a received request's own; a BLS call's parent
  std::shared_ptr<RequestState> state;  // a received request's answering side; null for BLS
  uint32_t release_flags = 1;     // TRITONSERVER_REQUEST_RELEASE_ALL
};

struct PyResponseSender {
  std::shared_ptr<RequestState> state;
};

// Triton's PyParametersToJSON: a dict of str keys and bool/int/str values as a JSON string;
// ModelException with Triton's texts otherwise ("Expect dict, got <type>" for a non-dict).
// None gives "{}". Needs the GIL.
std::string ParametersToJson(const py::object& parameters);

// Adds TritonError, InferenceResponse, InferenceRequest (without exec), InferenceResponseSender,
// PreferredMemory, MemoryType, TRITONSERVER_MEMORY_*, InferenceTrace to m.
void BindInferTypes(py::module_& m);
// Adds InferenceRequest.exec / async_exec and ResponseIterator (bls.cc).
void BindBls(py::module_& m);
// Adds Logger, LogLevel, MetricFamily, Metric, MetricKind, load_model, unload_model,
// is_model_ready, get_model_dir (services.cc).
void BindServices(py::module_& m);

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_PY_TYPES_H_
