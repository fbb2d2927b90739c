#include "bls.h"

#include <pybind11/stl.h>

#include <cstddef>
#include <optional>
#include <vector>

namespace vramd::python {
namespace {

constexpr char kOnlyInExecute[] = "BLS is only supported during the 'execute' function.";

// The model a BLS call is made for, and the owner of the request it is made on behalf of;
// Triton's rule: not while the instance initializes or finalizes.
std::shared_ptr<ModelShared> CallerModel(VramdOwner* owner) {
  *owner = 0;
  if (const CallContext* context = CurrentContext(); context != nullptr && context->model) {
    if (!context->instance || !context->instance->initialized.load() ||
        context->instance->finalizing.load()) {
      throw ModelException(kOnlyInExecute);
    }
    if (context->phase == Phase::kExecute) *owner = context->owner;
    return context->model;
  }
  // A thread the model started: allowed (Triton checks only the stub's state).
  auto model = CurrentModel();
  if (!model || !model->alive.load()) throw ModelException(kOnlyInExecute);
  return model;
}

std::shared_ptr<PyInferResponse> ErrorResponse(const std::string& message) {
  auto response = std::make_shared<PyInferResponse>();
  response->error = std::make_shared<PyError>(PyError{message, kTritonInternal});
  return response;
}

class ResponseIterator {
 public:
  explicit ResponseIterator(std::shared_ptr<BlsCall> call) : call_(std::move(call)) {}
  ~ResponseIterator() { call_->Abandon(); }

  void Iter() {
    if (finished_ && index_ >= seen_.size()) index_ = 0;
  }

  std::shared_ptr<PyInferResponse> Next() {
    if (finished_) {
      if (index_ < seen_.size()) return seen_[index_++];
      throw py::stop_iteration("Iteration is done for the responses.");
    }
    VramdInferResult* result = nullptr;
    bool final = false;
    std::string error;
    bool more;
    {
      py::gil_scoped_release release;
      more = call_->Next(&result, &final, &error);
    }
    if (!more) {
      finished_ = true;
      index_ = seen_.size();
      throw py::stop_iteration("Iteration is done for the responses.");
    }
    std::shared_ptr<PyInferResponse> response;
    if (result != nullptr) {
      response = ResponseFromResult(call_->model(), result);
    } else if (!error.empty()) {
      response = ErrorResponse(error);
    } else {
      response = std::make_shared<PyInferResponse>();  // the final flag alone: empty
    }
    seen_.push_back(response);
    if (final) {
      finished_ = true;
      index_ = seen_.size();
    }
    return response;
  }

  // Triton's InferenceResponseIterator.cancel(): the responses still come, to the final one.
  void Cancel() { call_->Cancel(); }

 private:
  std::shared_ptr<BlsCall> call_;
  std::vector<std::shared_ptr<PyInferResponse>> seen_;
  size_t index_ = 0;
  bool finished_ = false;
};

py::object Exec(const std::shared_ptr<PyInferRequest>& request, bool decoupled) {
  VramdOwner owner = 0;
  std::shared_ptr<ModelShared> model = CallerModel(&owner);
  if (request->model_name.empty()) throw ModelException("BLS request has no model_name");
  std::shared_ptr<BlsCall> call;
  {
    py::gil_scoped_release release;
    call = BlsCall::Start(model, *request, decoupled, owner);
  }
  if (decoupled) return py::cast(std::make_shared<ResponseIterator>(call));
  VramdInferResult* result = nullptr;
  bool final = false;
  std::string error;
  bool got;
  {
    py::gil_scoped_release release;
    got = call->Next(&result, &final, &error);
    call->Abandon();  // a model that is not decoupled sends one response
  }
  if (!got || (result == nullptr && error.empty())) {
    return py::cast(ErrorResponse("An error occurred while performing BLS request."));
  }
  if (result == nullptr) return py::cast(ErrorResponse(error));
  return py::cast(ResponseFromResult(model, result));
}

}  // namespace

BlsCall::~BlsCall() {
  Abandon();
  if (cancel_token_ != nullptr) {
    model_->server->infer_cancel_release(model_->server->server, cancel_token_);
  }
}

void BlsCall::Cancel() {
  if (cancel_token_ != nullptr) model_->server->infer_cancel(model_->server->server, cancel_token_);
}

std::shared_ptr<BlsCall> BlsCall::Start(std::shared_ptr<ModelShared> model,
                                        const PyInferRequest& request, bool decoupled,
                                        VramdOwner parent_owner) {
  auto call = std::make_shared<BlsCall>(model);
  std::vector<VramdTensor> inputs;
  std::vector<VramdMemory> memory;
  for (const auto& tensor : request.inputs) {
    if (!tensor) continue;
    inputs.push_back(VramdTensor{tensor->name().c_str(), tensor->datatype(),
                                 tensor->shape().data(), tensor->shape().size(), tensor->data(),
                                 tensor->byte_size()});
    memory.push_back(tensor->memory());
  }
  std::vector<const char*> outputs;
  for (const auto& name : request.requested_outputs) outputs.push_back(name.c_str());

  VramdInferCall c{};
  c.struct_size = sizeof(c);
  c.model = request.model_name.c_str();
  c.version = request.model_version < 0 ? 0 : request.model_version;
  c.id = request.id.empty() ? nullptr : request.id.c_str();
  c.inputs = inputs.data();
  c.input_memory = memory.data();
  c.input_count = inputs.size();
  c.requested_outputs = outputs.data();
  c.requested_output_count = outputs.size();
  c.parameters_json = request.parameters.c_str();
  c.flags = request.flags;
  c.correlation_id = request.correlation_is_string ? 0 : request.correlation_id;
  c.correlation_id_string =
      request.correlation_is_string ? request.correlation_id_string.c_str() : nullptr;
  c.timeout_us = request.timeout_us;
  c.traceparent = request.trace.traceparent.empty() ? nullptr : request.trace.traceparent.c_str();
  // Triton's default: outputs where the called model leaves them (a GPU tensor stays on its
  // GPU); TRITONSERVER_MEMORY_CPU brings them to host.
  switch (request.preferred_memory.type) {
    case PreferredMemory::kGPU:
      c.preferred_output_memory = {VRAMD_DEVICE_GPU,
                                   static_cast<int32_t>(request.preferred_memory.device_id)};
      break;
    case PreferredMemory::kDefault:
      c.preferred_output_memory = {VRAMD_DEVICE_GPU, -1};
      break;
    case PreferredMemory::kCPU:
      c.preferred_output_memory = {VRAMD_DEVICE_CPU, -1};
      break;
  }
  c.decoupled = decoupled ? 1 : 0;
  c.parent_owner = parent_owner;
  // exec() without decoupled waits for its one response while the caller's InferenceRequest
  // (and so its input tensors) stays referenced, so the called model reads them in place. A
  // decoupled call's iterator may outlive the request object: its inputs are copied.
  c.inputs_outlive_call = decoupled ? 0 : 1;

  const VramdServerApi* api = model->server;
  if (api->struct_size > offsetof(VramdServerApi, infer_cancel_release)) {
    c.cancel_token = &call->cancel_token_;
  }
  auto* holder = new std::shared_ptr<BlsCall>(call);  // deleted by the final OnResult
  VramdError error{};
  if (!model->alive.load() ||
      api->infer_async(api->server, &c, &BlsCall::OnResult, holder, &error) != VRAMD_OK) {
    delete holder;
    std::lock_guard<std::mutex> lock(call->mu_);
    call->start_error_ = model->alive.load() ? error.message : "the calling model is unloading";
    call->items_.push_back(Item{nullptr, true});
    call->ended_ = true;
  }
  return call;
}

void BlsCall::OnResult(void* context, VramdInferResult* result, int32_t final) {
  auto* holder = static_cast<std::shared_ptr<BlsCall>*>(context);
  BlsCall& call = **holder;
  {
    std::lock_guard<std::mutex> lock(call.mu_);
    if (call.abandoned_) {
      if (result != nullptr) call.model_->server->infer_result_release(call.model_->server->server,
                                                                        result);
    } else {
      call.items_.push_back(Item{result, final != 0});
    }
    if (final) call.ended_ = true;
  }
  call.cv_.notify_all();
  if (final) delete holder;
}

bool BlsCall::Next(VramdInferResult** result, bool* final, std::string* error_text) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !items_.empty() || ended_; });
  if (items_.empty()) return false;
  Item item = items_.front();
  items_.pop_front();
  *result = item.result;
  *final = item.final;
  if (item.result == nullptr && !start_error_.empty()) {
    *error_text = start_error_;
    start_error_.clear();
  }
  return true;
}

void BlsCall::Abandon() {
  std::deque<Item> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    abandoned_ = true;
    dropped.swap(items_);
  }
  for (const Item& item : dropped) {
    if (item.result != nullptr) model_->server->infer_result_release(model_->server->server,
                                                                     item.result);
  }
}

std::shared_ptr<PyInferResponse> ResponseFromResult(const std::shared_ptr<ModelShared>& model,
                                                    VramdInferResult* result) {
  const VramdServerApi* api = model->server;
  auto response = std::make_shared<PyInferResponse>();
  if (const char* parameters = api->infer_result_parameters(api->server, result)) {
    response->parameters = parameters;
  }
  const char* message = nullptr;
  VramdCode code = api->infer_result_error(api->server, result, &message);
  if (code != VRAMD_OK) {
    response->error = std::make_shared<PyError>(
        PyError{message != nullptr ? message : "", TritonFromCode(code)});
    api->infer_result_release(api->server, result);
    return response;
  }
  std::weak_ptr<ModelShared> weak = model;
  // Released when the last tensor over it is gone (skipped once the model is destroyed: the
  // server table is no longer valid then).
  std::shared_ptr<void> keepalive(result, [weak, api](void* r) {
    auto owner = weak.lock();
    if (owner && owner->alive.load()) {
      api->infer_result_release(api->server, static_cast<VramdInferResult*>(r));
    }
  });
  const size_t count = api->infer_result_output_count(api->server, result);
  for (size_t i = 0; i < count; ++i) {
    VramdTensor tensor{};
    VramdMemory memory{VRAMD_DEVICE_CPU, -1};
    VramdError error{};
    if (api->infer_result_output(api->server, result, i, &tensor, &memory, &error) != VRAMD_OK) {
      return ErrorResponse(error.message);
    }
    std::vector<int64_t> shape(tensor.shape, tensor.shape + tensor.rank);
    response->outputs.push_back(PbTensor::FromBorrowed(tensor.name, tensor.datatype,
                                                       std::move(shape), tensor.data,
                                                       tensor.byte_size, memory, keepalive));
  }
  return response;
}

void BindBls(py::module_& m) {
  py::class_<ResponseIterator, std::shared_ptr<ResponseIterator>>(m, "ResponseIterator")
      .def("__iter__",
           [](std::shared_ptr<ResponseIterator> it) {
             it->Iter();
             return it;
           })
      .def("__next__", &ResponseIterator::Next)
      .def("cancel", &ResponseIterator::Cancel);

  auto request = py::reinterpret_borrow<py::object>(m.attr("InferenceRequest"));
  request.attr("exec") = py::cpp_function(
      [](std::shared_ptr<PyInferRequest> self, bool decoupled) { return Exec(self, decoupled); },
      py::is_method(request), py::arg("decoupled") = false);
  request.attr("async_exec") = py::cpp_function(
      [](std::shared_ptr<PyInferRequest> self, bool decoupled) {
        py::object loop = py::module_::import("asyncio").attr("get_running_loop")();
        // The executor's thread has no context: it takes the caller's.
        std::optional<CallContext> context;
        if (const CallContext* current = CurrentContext()) context = *current;
        py::cpp_function run([self, decoupled, context]() {
          std::optional<ContextScope> scope;
          if (context) scope.emplace(*context);
          return Exec(self, decoupled);
        });
        return loop.attr("run_in_executor")(py::none(), run);
      },
      py::is_method(request), py::arg("decoupled") = false);
}

}  // namespace vramd::python
