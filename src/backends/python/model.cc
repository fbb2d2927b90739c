#include "model.h"

#include <pybind11/stl.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "common.h"
#include "gil_turn.h"
#include "interpreter.h"
#include "ledger_table.h"
#include "numpy_ledger.h"
#include "py_types.h"
#include "torch_ledger.h"

namespace vramd::python {
namespace {

py::module_ Host() { return py::module_::import("vramd_python_host"); }

// "execute", made once: attr("execute") made a str from the C string on every call (3% of a
// python identity model's instance thread). The interpreter is never finalized, so it may live
// forever. REQUIRES: the GIL.
py::handle ExecuteName() {
  static PyObject* name = PyUnicode_InternFromString("execute");
  return name;
}

// Outputs up to this many bytes in all are copied into a response with the GIL held.
constexpr size_t kCopyWithGilBytes = 64 * 1024;

// Logs the whole traceback and returns it (the caller's error keeps its tail).
std::string Traceback(const ModelShared& model, const std::string& what,
                      const py::error_already_set& e) {
  std::string text = what + ": " + TracebackText(e);
  Log(model.server, VRAMD_LOG_ERROR, "python model '" + model.name + "': " + text);
  return text;
}

// What the config says, read with Python's json (the backend links no JSON library).
VramdCode ReadConfig(ModelShared* model, std::string* error) {
  py::dict config = py::module_::import("json").attr("loads")(model->config_json);
  auto get = [](const py::dict& d, const char* key) -> py::object {
    return d.contains(key) ? py::object(d[key]) : py::object(py::none());
  };
  py::object policy = get(config, "model_transaction_policy");
  if (py::isinstance<py::dict>(policy)) {
    py::object decoupled = get(policy, "decoupled");
    model->decoupled = !decoupled.is_none() && decoupled.cast<bool>();
  }
  py::object file = get(config, "default_model_filename");
  std::string file_name = file.is_none() ? "" : file.cast<std::string>();
  if (file_name.empty()) file_name = "model.py";
  model->model_file = (std::filesystem::path(model->version_dir) / file_name).string();
  py::object outputs = get(config, "output");
  if (py::isinstance<py::list>(outputs)) {
    for (py::handle output : outputs) {
      model->output_names.push_back(py::cast<py::dict>(output)["name"].cast<std::string>());
    }
  }
  py::object parameters = get(config, "parameters");
  if (py::isinstance<py::dict>(parameters)) {
    py::dict p = parameters;
    auto value = [&](const char* key) -> std::optional<std::string> {
      if (!p.contains(key)) return std::nullopt;
      py::object entry = p[key];
      if (!py::isinstance<py::dict>(entry) || !py::cast<py::dict>(entry).contains("string_value")) {
        return std::string();
      }
      return py::cast<py::dict>(entry)["string_value"].cast<std::string>();
    };
    // EXECUTION_ENV_PATH is the hosting layer's (remote/hosting.h): it refuses in-process hosting
    // with one, and a host process runs with the env's Python, so here it needs nothing.
    // The memory hooks (numpy_ledger.h, torch_ledger.h): "on" (the default) or "off".
    for (auto [key, flag] : {std::pair<const char*, bool*>{"VRAMD_PYTHON_LEDGER_NUMPY",
                                                           &model->ledger_numpy},
                             {"VRAMD_PYTHON_LEDGER_TORCH", &model->ledger_torch},
                             {"VRAMD_PYTHON_TORCH_INSTANCE_STREAM",
                              &model->torch_instance_stream}}) {
      auto setting = value(key);
      if (!setting) continue;
      if (*setting == "off" || *setting == "on") {
        *flag = *setting == "on";
      } else {
        *error = "python model '" + model->name + "': " + key + " must be 'on' or 'off', not '" +
                 *setting + "'";
        return VRAMD_INVALID_ARGUMENT;
      }
    }
    if (auto bytes = value("VRAMD_PYTHON_LEDGER_NUMPY_MIN_BYTES")) {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(bytes->c_str(), &end, 10);
      if (bytes->empty() || *end != '\0' || (*bytes)[0] == '-') {
        *error = "python model '" + model->name +
                 "': VRAMD_PYTHON_LEDGER_NUMPY_MIN_BYTES must be a number of bytes, not '" +
                 *bytes + "'";
        return VRAMD_INVALID_ARGUMENT;
      }
      model->numpy_min_bytes = static_cast<size_t>(n);
    }
    if (auto force = value("FORCE_CPU_ONLY_INPUT_TENSORS")) {
      if (*force == "no") {
        model->force_cpu_inputs = false;
      } else if (*force != "yes") {
        *error = "python model '" + model->name + "': FORCE_CPU_ONLY_INPUT_TENSORS must be "
                 "'yes' or 'no', not '" + *force + "'";
        return VRAMD_UNSUPPORTED;
      }
    }
  }
  return VRAMD_OK;
}

std::string FailureMessage(const std::string& instance, const std::string& failure) {
  return "Failed to process the request(s) for model '" + instance + "', message: " + failure;
}

// Logs the failure and answers every request still open with it.
void FailAll(const ModelShared& model, const std::string& instance,
             const std::vector<std::shared_ptr<RequestState>>& states, const std::string& failure) {
  const std::string message = FailureMessage(instance, failure);
  Log(model.server, VRAMD_LOG_ERROR, message);
  for (const auto& state : states) state->FailIfOpen(VRAMD_INTERNAL, message);
}

// Sends each built response as its request's final one; "" or the first failure (the rest
// are then dropped unsent).
std::string SendPreparedResponses(const std::vector<std::shared_ptr<RequestState>>& states,
                                  std::vector<std::unique_ptr<PreparedResponse>>* prepared) {
  std::string failure;
  for (size_t i = 0; i < prepared->size() && failure.empty(); ++i) {
    if (!(*prepared)[i]) continue;
    try {
      states[i]->SendPrepared(std::move((*prepared)[i]), VRAMD_RESPONSE_FLAG_FINAL);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  prepared->clear();
  return failure;
}

// A non-decoupled model's answers: each request's response, then its end. Sent on the instance
// thread: handing them to a thread of their own (tried on the H200) lost 40% of the python
// identity's requests at one client and gained nothing at 16 (docs/benchmarks.md).
void SendAll(const ModelShared& model, const std::string& instance,
             const std::vector<std::shared_ptr<RequestState>>& states,
             std::vector<std::unique_ptr<PreparedResponse>>* prepared) {
  const std::string failure = SendPreparedResponses(states, prepared);
  if (!failure.empty()) {
    FailAll(model, instance, states, failure);
    return;
  }
  for (const auto& state : states) state->FinishNonDecoupled();
}

}  // namespace

VramdCode PythonModel::Create(const VramdModelInfo& info, std::unique_ptr<PythonModel>* out,
                              std::string* error) {
  auto shared = std::make_shared<ModelShared>();
  shared->name = info.name ? info.name : "";
  shared->version = info.version;
  shared->model_dir = info.model_dir ? info.model_dir : "";
  shared->version_dir = info.version_dir ? info.version_dir : "";
  shared->config_json.assign(info.config_json ? info.config_json : "{}",
                             info.config_json ? info.config_json_size : 2);
  shared->server = info.server;
  shared->owner = info.owner;

  ScopedGil gil;
  std::unique_ptr<PythonModel> model(new PythonModel());
  try {
    if (VramdCode rc = ReadConfig(shared.get(), error); rc != VRAMD_OK) return rc;
  } catch (const py::error_already_set& e) {
    *error = "python model '" + shared->name + "': cannot read its config: " + ErrorText(e);
    return VRAMD_INVALID_ARGUMENT;
  }
  if (!std::filesystem::is_regular_file(shared->model_file)) {
    *error = "python model '" + shared->name + "': '" + shared->model_file + "' not found";
    return VRAMD_NOT_FOUND;
  }
  try {
    shared->package = Host()
                          .attr("create_package")(shared->name, shared->version,
                                                  shared->version_dir, shared->model_dir)
                          .cast<std::string>();
    RegisterModel(shared);
    model->shared_ = shared;
    shared->ledger_table = AcquireLedgerTable(info.server);
    ContextScope scope(CallContext{shared, nullptr, Phase::kImport, info.owner});
    NumpyLedgerScope numpy(*shared);
    py::object module = Host().attr("import_model")(
        shared->package, std::filesystem::path(shared->model_file).filename().string());
    py::object cls = module.attr("TritonPythonModel");
    if (!py::hasattr(cls, "execute")) {
      *error = "Python model " + shared->model_file + " does not implement `execute` method.";
      return VRAMD_INVALID_ARGUMENT;  // ~PythonModel removes the package
    }
    model->class_ = std::make_unique<py::object>(std::move(cls));
  } catch (const py::error_already_set& e) {
    *error = Traceback(*shared, "failed to import " + shared->model_file, e);
    return VRAMD_INTERNAL;
  }
  *out = std::move(model);
  return VRAMD_OK;
}

PythonModel::~PythonModel() {
  ScopedGil gil;
  class_.reset();
  if (!shared_) return;
  shared_->alive.store(false);
  UnregisterModel(shared_.get());
  try {
    if (!shared_->package.empty()) Host().attr("remove_package")(shared_->package);
  } catch (const py::error_already_set& e) {
    Log(shared_->server, VRAMD_LOG_WARNING,
        "python model '" + shared_->name + "': removing its modules failed: " + ErrorText(e));
  }
  // Arrays its modules held are freed by now; what outlives the model is freed through
  // another model's table (ledger_table.h).
  ReleaseLedgerTable(shared_->ledger_table);
}

CallContext PythonInstance::Context(Phase phase, VramdOwner owner) const {
  return CallContext{model_, status_, phase, owner, owner_};
}

py::object PythonInstance::Loop() {
  if (!loop_) {
    CallContext context = Context(Phase::kExecute, owner_);
    py::cpp_function bind([context]() {
      BindThread(context);
      InstallNumpyLedger(*context.model);  // the loop's tasks copy this thread's context
    });
    loop_ = std::make_unique<py::object>(Host().attr("InstanceLoop")(name_, bind));
  }
  return *loop_;
}

VramdCode PythonInstance::Create(PythonModel* model, const VramdInstanceInfo& info,
                                 std::unique_ptr<PythonInstance>* out, std::string* error) {
  std::unique_ptr<PythonInstance> instance(new PythonInstance());
  instance->model_ = model->shared();
  instance->name_ = info.name ? info.name : "";
  instance->owner_ = info.owner;
  instance->device_ = info.device_id < 0 ? 0 : info.device_id;
  const ModelShared& shared = *instance->model_;

  ScopedGil gil;
  ContextScope scope(instance->Context(Phase::kInitialize, info.owner));
  NumpyLedgerScope numpy(shared);
  try {
    py::object pool = TorchPool(shared, info.kind == VRAMD_DEVICE_GPU, instance->device_,
                                instance->name_);
    if (!pool.is_none()) instance->torch_pool_ = std::make_unique<py::object>(std::move(pool));
    py::dict args;
    args["model_config"] = shared.config_json;
    args["model_instance_kind"] = info.kind == VRAMD_DEVICE_GPU ? "GPU" : "CPU";
    args["model_instance_name"] = instance->name_;
    args["model_instance_device_id"] = std::to_string(info.device_id < 0 ? 0 : info.device_id);
    args["model_repository"] = shared.model_dir;
    args["model_version"] = std::to_string(shared.version);
    args["model_name"] = shared.name;
    instance->object_ = std::make_unique<py::object>(model->model_class()());
    if (py::hasattr(*instance->object_, "initialize")) {
      py::object result =
          instance->Call(instance->object_->attr("initialize"), py::make_tuple(args));
      if (Host().attr("is_coroutine")(result).cast<bool>()) instance->Loop().attr("run")(result);
    }
  } catch (const py::error_already_set& e) {
    *error = Traceback(shared, "instance '" + instance->name_ + "' failed to initialize", e);
    instance->status_->finalizing.store(true);  // no finalize(): it never initialized
    return VRAMD_INTERNAL;
  } catch (const std::exception& e) {
    *error = "instance '" + instance->name_ + "' failed to initialize: " + e.what();
    instance->status_->finalizing.store(true);
    return VRAMD_INTERNAL;
  }
  instance->status_->initialized.store(true);
  *out = std::move(instance);
  return VRAMD_OK;
}

PythonInstance::~PythonInstance() {
  const std::string destroyed = "instance '" + name_ + "' of python model '" + model_->name +
                                "' destroyed before the model sent the final response";
  {
    ScopedGil gil;
    const bool call_finalize = status_->initialized.load();
    status_->finalizing.store(true);
    ContextScope scope(Context(Phase::kFinalize, owner_));
    NumpyLedgerScope numpy(*model_);
    if (loop_) {  // Triton stops the loop before finalize()
      try {
        loop_->attr("stop")();
      } catch (const py::error_already_set& e) {
        Log(model_->server, VRAMD_LOG_WARNING, "python model '" + model_->name +
                                                   "': stopping the asyncio loop of instance '" +
                                                   name_ + "' failed: " + ErrorText(e));
      }
    }
    if (call_finalize && object_ && py::hasattr(*object_, "finalize")) {
      try {
        Call(object_->attr("finalize"));
      } catch (const py::error_already_set& e) {
        Log(model_->server, VRAMD_LOG_ERROR,
            "python model '" + model_->name + "': finalize of instance '" + name_ +
                "' failed: " + TracebackText(e));
      }
    }
    object_.reset();
    loop_.reset();
    // After the model's objects: the pool returns its cached segments (torch's ~MemPool).
    torch_pool_.reset();
  }
  for (const auto& state : outstanding_->TakeAll()) state->FailIfOpen(VRAMD_INTERNAL, destroyed);
}

std::shared_ptr<PyInferRequest> PythonInstance::MakeRequest(const VramdRequest& request) {
  if (request.struct_size < offsetof(VramdRequest, responder) + sizeof(request.responder) ||
      request.responder == nullptr) {
    throw ModelException("the server passed a request without a responder");
  }
  auto r = std::make_shared<PyInferRequest>();
  r->id = request.id ? request.id : "";
  if (request.correlation_id_string != nullptr) {
    r->correlation_is_string = true;
    r->correlation_id_string = request.correlation_id_string;
  } else {
    r->correlation_id = request.correlation_id;
  }
  r->flags = request.flags;
  r->timeout_us = request.timeout_us;
  if (request.struct_size >= offsetof(VramdRequest, traceparent) + sizeof(request.traceparent) &&
      request.traceparent != nullptr) {
    r->trace.traceparent = request.traceparent;
  }
  if (request.parameters_json != nullptr) {
    r->parameters.assign(request.parameters_json, request.parameters_json_size);
  }
  if (request.requested_output_count == 0) {
    r->requested_outputs = model_->output_names;
  } else {
    for (size_t i = 0; i < request.requested_output_count; ++i) {
      r->requested_outputs.emplace_back(request.requested_outputs[i]);
    }
  }
  const VramdServerApi* api = model_->server;
  for (size_t i = 0; i < request.input_count; ++i) {
    const VramdTensor& t = request.inputs[i];
    VramdMemory memory = request.input_memory ? request.input_memory[i]
                                              : VramdMemory{VRAMD_DEVICE_CPU, -1};
    std::vector<int64_t> shape(t.shape, t.shape + t.rank);
    const bool on_gpu = memory.kind == VRAMD_DEVICE_GPU;
    if (model_->decoupled || (on_gpu && model_->force_cpu_inputs)) {
      // A copy in host memory the tensor owns.
      auto copy = std::make_shared<std::vector<unsigned char>>(t.byte_size);
      if (t.byte_size > 0) {
        if (on_gpu) {
          VramdError e{};
          if (api->copy(api->server, VRAMD_DEVICE_CPU, -1, copy->data(), memory.kind,
                        memory.device_id, t.data, t.byte_size, nullptr, &e) != VRAMD_OK) {
            throw ModelException(std::string("input '") + t.name + "': " + e.message);
          }
        } else {
          std::memcpy(copy->data(), t.data, t.byte_size);
        }
      }
      const void* data = copy->data();
      r->inputs.push_back(PbTensor::FromBorrowed(t.name, t.datatype, std::move(shape), data,
                                                 t.byte_size, VramdMemory{VRAMD_DEVICE_CPU, -1},
                                                 std::move(copy)));
    } else {
      r->inputs.push_back(PbTensor::FromBorrowed(t.name, t.datatype, std::move(shape), t.data,
                                                 t.byte_size, memory, nullptr));
    }
  }
  VramdMemory preferred{VRAMD_DEVICE_CPU, -1};
  if (request.struct_size > offsetof(VramdRequest, preferred_output_memory)) {
    preferred = request.preferred_output_memory;
  }
  r->state = std::make_shared<RequestState>(model_, request.responder, r->id, preferred);
  return r;
}

py::object PythonInstance::Call(const py::object& fn, const py::tuple& args) {
  if (!torch_pool_) return fn(*args);
  return TorchPoolCall(*torch_pool_, device_, fn, args);
}

std::vector<std::unique_ptr<PreparedResponse>> PythonInstance::ProcessReturned(
    const std::vector<std::shared_ptr<RequestState>>& states, py::object returned) {
  std::vector<std::unique_ptr<PreparedResponse>> prepared(states.size());
  if (returned.is_none()) return prepared;
  if (model_->decoupled) {
    throw ModelException("Python model '" + name_ +
                         "' is using the decoupled mode and the execute function must return "
                         "None.");
  }
  if (!py::isinstance<py::list>(returned)) {
    throw ModelException("Expected a list in the execute return, found type '" +
                         TypeName(returned) + "'.");
  }
  py::list responses = returned;
  if (py::len(responses) != states.size()) {
    throw ModelException(
        "Number of InferenceResponse objects do not match the number of InferenceRequest "
        "objects. InferenceRequest(s) size is:" + std::to_string(states.size()) +
        ", and InferenceResponse(s) size is:" + std::to_string(py::len(responses)) + "\n");
  }
  std::vector<std::shared_ptr<PyInferResponse>> typed(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    py::object item = responses[i];
    if (item.is_none()) continue;  // answered through the response sender, or not at all
    // One caster load (a type lookup), not isinstance and then a cast (two).
    py::detail::make_caster<std::shared_ptr<PyInferResponse>> caster;
    if (!caster.load(item, /*convert=*/false)) {
      throw ModelException(
          "Expected an 'InferenceResponse' object in the execute function return list, found "
          "type '" + TypeName(item) + "'.");
    }
    typed[i] = py::detail::cast_op<std::shared_ptr<PyInferResponse>>(std::move(caster));
    states[i]->CheckSend(true, VRAMD_RESPONSE_FLAG_FINAL);
  }
  // Build every response (outputs copied to the server), then drop the model's objects (the
  // numpy arrays charged to the requests, numpy_ledger.h), and only then send: the final flag
  // closes a request's ledger owner, and an array still referenced then would read as its leak.
  // Small outputs are copied with the GIL held: releasing it once more would hand it to the
  // other instance threads waiting for it before the drop below could run.
  size_t output_bytes = 0;
  for (const auto& response : typed) {
    if (!response) continue;
    for (const auto& tensor : response->outputs) output_bytes += tensor ? tensor->byte_size() : 0;
  }
  {
    std::optional<py::gil_scoped_release> release;
    if (output_bytes > kCopyWithGilBytes) release.emplace();
    for (size_t i = 0; i < states.size(); ++i) {
      if (typed[i]) prepared[i] = states[i]->Prepare(*typed[i]);
    }
  }
  typed.clear();
  responses = py::list();
  returned = py::none();
  return prepared;
}

VramdCode PythonInstance::ExecuteRequests(VramdRequest* const* requests, size_t count,
                                          VramdError* error) {
  std::vector<std::shared_ptr<RequestState>> states;
  std::vector<std::unique_ptr<PreparedResponse>> prepared;
  std::string failure;
  // The requests are made before the GIL is taken: nothing in them is Python's, and every
  // microsecond under the GIL is one the other instances' threads wait.
  std::vector<std::shared_ptr<PyInferRequest>> made;
  made.reserve(count);
  try {
    for (size_t i = 0; i < count; ++i) {
      made.push_back(MakeRequest(*requests[i]));
      states.push_back(made.back()->state);
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  // The GIL is taken once per execute: the responses are sent after it is released, since
  // each acquisition is a hand-over when other instances' threads wait for it.
  if (failure.empty()) {
    ExecuteGil gil;
    ContextScope scope(Context(Phase::kExecute, count > 0 ? requests[0]->owner : owner_));
    KeepNumpyLedger(*model_);
    try {
      py::list list(count);
      for (size_t i = 0; i < count; ++i) {
        list[i] = py::cast(std::move(made[i]));
      }
      made.clear();
      py::object returned = Call(object_->attr(ExecuteName()), py::make_tuple(list));
      // A list or None is the common answer; only anything else may be a coroutine.
      if (!py::isinstance<py::list>(returned) && !returned.is_none() &&
          Host().attr("is_coroutine")(returned).cast<bool>()) {
        if (model_->decoupled) {
          // Triton runs a decoupled model's coroutine in the background: execute returns now.
          auto pending = states;
          std::shared_ptr<ModelShared> model = model_;
          std::string name = name_;
          py::cpp_function on_error([pending, model, name](std::string text) {
            std::string message = "Failed to process the request(s) for model '" + name +
                                  "', message: " + text;
            Log(model->server, VRAMD_LOG_ERROR, message);
            py::gil_scoped_release release;
            for (const auto& state : pending) state->FailIfOpen(VRAMD_INTERNAL, message);
          });
          Loop().attr("submit")(returned, on_error);
          returned = py::none();
        } else {
          returned = Loop().attr("run")(returned);
        }
      }
      prepared = ProcessReturned(states, std::move(returned));
    } catch (const py::error_already_set& e) {
      failure = ErrorText(e);
      Log(model_->server, VRAMD_LOG_VERBOSE,
          "python model '" + model_->name + "': execute failed: " + TracebackText(e));
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (failure.empty() && !model_->decoupled) {
    SendAll(*model_, name_, states, &prepared);
    return VRAMD_OK;
  }
  if (failure.empty()) failure = SendPreparedResponses(states, &prepared);
  if (!failure.empty()) {
    prepared.clear();  // unsent after a failure: dropped
    FailAll(*model_, name_, states, failure);
    // Requests MakeRequest did not reach are handed back to vramd through the error return.
    if (states.size() < count) {
      SetError(error, FailureMessage(name_, failure));
      return VRAMD_INTERNAL;
    }
    return VRAMD_OK;
  }
  for (const auto& state : states) {
    state->set_outstanding(outstanding_);
    outstanding_->Add(state);
    if (state->closed()) outstanding_->Remove(state.get());
  }
  return VRAMD_OK;
}

}  // namespace vramd::python
