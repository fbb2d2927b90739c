// Bindings of TritonError, InferenceResponse, InferenceRequest (without BLS: bls.cc),
// InferenceResponseSender, PreferredMemory and InferenceTrace.
#include <pybind11/stl.h>

#include <set>

#include "py_types.h"
#include "request_state.h"

namespace vramd::python {

std::string ParametersToJson(const py::object& parameters) {
  if (parameters.is_none()) return "{}";
  if (!py::isinstance<py::dict>(parameters)) {
    throw ModelException("Expect dict, got " + TypeName(parameters));
  }
  py::dict dict = parameters;
  for (const auto& item : dict) {
    if (!py::isinstance<py::str>(item.first)) {
      throw ModelException("Expect parameters keys to have type str, found type " +
                           TypeName(item.first));
    }
    if (!py::isinstance<py::bool_>(item.second) && !py::isinstance<py::int_>(item.second) &&
        !py::isinstance<py::str>(item.second)) {
      throw ModelException("Expect parameters values to have type bool/int/str, found type " +
                           TypeName(item.second));
    }
  }
  return py::module_::import("json").attr("dumps")(dict).cast<std::string>();
}

namespace {

py::object CorrelationId(const PyInferRequest& r) {
  if (r.correlation_is_string) return py::str(r.correlation_id_string);
  return py::int_(r.correlation_id);
}

void SetCorrelationId(PyInferRequest& r, const py::object& id) {
  if (py::isinstance<py::str>(id)) {
    r.correlation_is_string = true;
    r.correlation_id_string = id.cast<std::string>();
  } else {
    r.correlation_is_string = false;
    r.correlation_id = id.cast<uint64_t>();
  }
}

void SendThroughSender(const std::shared_ptr<RequestState>& state,
                       const std::shared_ptr<PyInferResponse>& response, uint32_t flags) {
  if (!state) {
    throw ModelException(
        "Unable to send response. Response sender has no reference to the decoupled state of "
        "the model.");
  }
  py::gil_scoped_release release;
  state->Send(response.get(), flags);
}

}  // namespace

void BindInferTypes(py::module_& m) {
  py::class_<PyError, std::shared_ptr<PyError>> error(m, "TritonError");
  py::enum_<TritonCode>(error, "__ErrorCode")
      .value("UNKNOWN", kTritonUnknown)
      .value("INTERNAL", kTritonInternal)
      .value("NOT_FOUND", kTritonNotFound)
      .value("INVALID_ARG", kTritonInvalidArg)
      .value("UNAVAILABLE", kTritonUnavailable)
      .value("UNSUPPORTED", kTritonUnsupported)
      .value("ALREADY_EXISTS", kTritonAlreadyExists)
      .value("CANCELLED", kTritonCancelled);
  error
      .def(py::init([](std::string message, py::object code) {
             int value = kTritonInternal;
             if (!code.is_none()) value = py::int_(code).cast<int>();
             return std::make_shared<PyError>(PyError{std::move(message), value});
           }),
           py::arg("message"), py::arg("code") = py::none())
      .def("code", [](const PyError& e) { return static_cast<TritonCode>(e.code); })
      .def("message", [](const PyError& e) { return e.message; })
      .def("__str__", [](const PyError& e) { return e.message; })
      .def("__repr__", [](const PyError& e) { return "TritonError('" + e.message + "')"; });
  for (auto [name, code] : std::vector<std::pair<const char*, TritonCode>>{
           {"UNKNOWN", kTritonUnknown}, {"INTERNAL", kTritonInternal},
           {"NOT_FOUND", kTritonNotFound}, {"INVALID_ARG", kTritonInvalidArg},
           {"UNAVAILABLE", kTritonUnavailable}, {"UNSUPPORTED", kTritonUnsupported},
           {"ALREADY_EXISTS", kTritonAlreadyExists}, {"CANCELLED", kTritonCancelled}}) {
    const TritonCode value = code;
    error.def_property_readonly_static(name, [value](py::object) { return value; });
  }

  py::enum_<PreferredMemory::MemoryType>(m, "MemoryType")
      .value("TRITONSERVER_MEMORY_GPU", PreferredMemory::kGPU)
      .value("TRITONSERVER_MEMORY_CPU", PreferredMemory::kCPU)
      .export_values();
  py::class_<PreferredMemory>(m, "PreferredMemory")
      .def(py::init([](PreferredMemory::MemoryType type, int64_t device_id) {
             return PreferredMemory{type, device_id};
           }),
           py::arg("preferred_memory_type"), py::arg("preferred_device_id") = 0);

  py::class_<InferenceTrace>(m, "InferenceTrace")
      .def(py::init<>())
      .def("get_context", [](const InferenceTrace& t) -> py::object {
        if (t.traceparent.empty()) return py::none();
        // The value is hex and dashes (the server wrote it): nothing to escape.
        return py::str("{\"traceparent\": \"" + t.traceparent + "\"}");
      });

  py::class_<PyInferResponse, std::shared_ptr<PyInferResponse>>(m, "InferenceResponse")
      // `error` is taken as an object: pybind11 loading the usual None into a
      // shared_ptr<TritonError> first searches other modules for the type (attribute lookups),
      // which took 7% of a python identity model's instance thread.
      .def(py::init([](std::vector<std::shared_ptr<PbTensor>> outputs, py::object error,
                       py::object parameters) {
             auto r = std::make_shared<PyInferResponse>();
             r->outputs = std::move(outputs);
             if (!error.is_none()) {
               if (!py::isinstance<PyError>(error)) {
                 throw py::type_error("InferenceResponse: `error` must be a TritonError or None, "
                                      "not " + std::string(py::str(error.get_type().attr("__name__"))));
               }
               r->error = error.cast<std::shared_ptr<PyError>>();
             }
             r->parameters = ParametersToJson(parameters);
             return r;
           }),
           py::arg("output_tensors") = py::list(), py::arg("error") = py::none(),
           py::arg("parameters") = py::none())
      .def("output_tensors", [](const PyInferResponse& r) { return r.outputs; })
      .def("has_error", [](const PyInferResponse& r) { return r.error != nullptr; })
      .def("error", [](const PyInferResponse& r) -> py::object {
        if (!r.error) return py::none();
        return py::cast(r.error);
      })
      .def("parameters", [](const PyInferResponse& r) { return r.parameters; });

  py::class_<PyResponseSender, std::shared_ptr<PyResponseSender>>(m, "InferenceResponseSender")
      .def("send",
           [](PyResponseSender& s, std::shared_ptr<PyInferResponse> response, uint32_t flags) {
             SendThroughSender(s.state, response, flags);
           },
           py::arg("response") = static_cast<std::shared_ptr<PyInferResponse>>(nullptr),
           py::arg("flags") = 0)
      .def("is_cancelled", [](PyResponseSender& s) {
        if (!s.state) return false;
        py::gil_scoped_release release;
        return s.state->IsCancelled();
      });

  py::class_<PyInferRequest, std::shared_ptr<PyInferRequest>>(m, "InferenceRequest")
      .def(py::init([](std::string request_id, py::object correlation_id,
                       std::vector<std::shared_ptr<PbTensor>> inputs,
                       std::vector<std::string> requested_output_names, std::string model_name,
                       int64_t model_version, uint32_t flags, uint64_t timeout,
                       PreferredMemory preferred_memory, const InferenceTrace& trace,
                       py::object parameters) {
             auto r = std::make_shared<PyInferRequest>();
             r->id = std::move(request_id);
             SetCorrelationId(*r, correlation_id);
             r->inputs = std::move(inputs);
             r->requested_outputs = std::move(requested_output_names);
             r->model_name = std::move(model_name);
             r->model_version = model_version;
             r->flags = flags;
             r->timeout_us = timeout;
             r->preferred_memory = preferred_memory;
             r->parameters = ParametersToJson(parameters);
             r->trace = trace;
             return r;
           }),
           py::arg("request_id") = "", py::arg("correlation_id") = 0,
           py::arg("inputs"), py::arg("requested_output_names"), py::arg("model_name"),
           py::arg("model_version") = -1, py::arg("flags") = 0, py::arg("timeout") = 0,
           py::arg("preferred_memory") = PreferredMemory{}, py::arg("trace") = InferenceTrace{},
           py::arg("parameters") = py::none())
      .def("inputs", [](const PyInferRequest& r) { return r.inputs; })
      .def("request_id", [](const PyInferRequest& r) { return r.id; })
      .def("correlation_id", &CorrelationId)
      .def("flags", [](const PyInferRequest& r) { return r.flags; })
      .def("set_flags", [](PyInferRequest& r, uint32_t flags) { r.flags = flags; })
      .def("timeout", [](const PyInferRequest& r) { return r.timeout_us; })
      .def("parameters", [](const PyInferRequest& r) { return r.parameters; })
      .def("trace", [](const PyInferRequest& r) { return r.trace; })
      .def("model_name", [](const PyInferRequest& r) { return r.model_name; })
      .def("requested_output_names", [](const PyInferRequest& r) {
        return std::set<std::string>(r.requested_outputs.begin(), r.requested_outputs.end());
      })
      .def("get_response_sender", [](const PyInferRequest& r) {
        auto sender = std::make_shared<PyResponseSender>();
        sender->state = r.state;
        return sender;
      })
      .def("is_cancelled", [](const PyInferRequest& r) {
        if (!r.state) return false;
        py::gil_scoped_release release;
        return r.state->IsCancelled();
      })
      .def("set_release_flags", [](PyInferRequest& r, uint32_t flags) {
        if (flags & 2u) {  // TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
          throw ModelException("request rescheduling is not supported by vramd");
        }
        r.release_flags = flags;
      });

  // pb_utils.get_input_tensor_by_name, called for every input of every request: a request's
  // inputs are found here without making its inputs() list and a str per name (which showed in
  // the python identity model's profile); any other object is searched as Triton's Python does.
  m.def("get_input_tensor_by_name", [](py::object request, const std::string& name) -> py::object {
    // One caster load, not isinstance and then a cast: each looks up the type (a hash of its
    // name), which showed in the python identity model's profile.
    py::detail::make_caster<PyInferRequest> caster;
    if (caster.load(request, /*convert=*/false)) {
      const PyInferRequest& r = py::detail::cast_op<const PyInferRequest&>(caster);
      for (const auto& tensor : r.inputs) {
        if (tensor && tensor->name() == name) return py::cast(tensor);
      }
      return py::none();
    }
    for (py::handle tensor : request.attr("inputs")()) {
      if (tensor.attr("name")().cast<std::string>() == name) return py::reinterpret_borrow<py::object>(tensor);
    }
    return py::none();
  }, py::arg("inference_request"), py::arg("name"));
}

}  // namespace vramd::python
