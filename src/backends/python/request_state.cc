#include "request_state.h"

#include <cstring>
#include <utility>

namespace vramd::python {
namespace {

constexpr uint32_t kFinal = VRAMD_RESPONSE_FLAG_FINAL;

// Where an output goes: a GPU tensor stays on its GPU for a consumer that takes GPU memory (a
// BLS call that prefers a GPU), else it comes to host, as do host tensors.
VramdMemory OutputMemory(const PbTensor& tensor, const VramdMemory& preferred) {
  if (tensor.is_cpu() || preferred.kind != VRAMD_DEVICE_GPU) return {VRAMD_DEVICE_CPU, -1};
  return tensor.memory();
}

bool BuildResponse(const ModelShared& model, VramdResponder* responder,
                   const VramdMemory& preferred, const PyInferResponse& source,
                   VramdResponse** out, std::string* error) {
  const VramdServerApi* api = model.server;
  VramdError e{};
  VramdResponse* response = nullptr;
  if (api->response_create(api->server, responder, &response, &e) != VRAMD_OK) {
    *error = e.message;
    return false;
  }
  for (const auto& tensor : source.outputs) {
    if (!tensor) continue;
    const auto& shape = tensor->shape();
    void* data = nullptr;
    const VramdMemory to = OutputMemory(*tensor, preferred);
    if (api->response_add_output(api->server, response, tensor->name().c_str(),
                                 tensor->datatype(), shape.data(), shape.size(),
                                 tensor->byte_size(), to.kind, to.device_id, &data,
                                 &e) != VRAMD_OK) {
      *error = e.message;
      api->response_delete(api->server, response);
      return false;
    }
    if (tensor->byte_size() == 0) continue;
    // On the legacy default stream: from_dlpack made it wait for the producer's stream.
    if (tensor->is_cpu()) {
      // A model may answer with an input it was given, read in place from a client's shared
      // memory, and the client may place the output over those same bytes.
      std::memmove(data, tensor->data(), tensor->byte_size());
    } else if (api->copy(api->server, to.kind, to.device_id, data, tensor->memory().kind,
                         tensor->memory().device_id, tensor->data(), tensor->byte_size(),
                         nullptr, &e) != VRAMD_OK) {
      *error = "output '" + tensor->name() + "': " + e.message;
      api->response_delete(api->server, response);
      return false;
    }
  }
  if (!source.parameters.empty() && source.parameters != "{}" &&
      api->response_set_parameters(api->server, response, source.parameters.data(),
                                   source.parameters.size(), &e) != VRAMD_OK) {
    *error = e.message;
    api->response_delete(api->server, response);
    return false;
  }
  *out = response;
  return true;
}

}  // namespace

bool RespondWith(const ModelShared& model, VramdResponder* responder,
                 const VramdMemory& preferred, const PyInferResponse* response, uint32_t flags,
                 std::string* error) {
  const VramdServerApi* api = model.server;
  VramdError e{};
  VramdCode rc;
  if (response == nullptr) {
    rc = api->respond(api->server, responder, nullptr, VRAMD_OK, nullptr, flags, &e);
  } else if (response->error) {
    rc = api->respond(api->server, responder, nullptr, CodeFromTriton(response->error->code),
                      response->error->message.c_str(), flags, &e);
  } else {
    VramdResponse* built = nullptr;
    if (!BuildResponse(model, responder, preferred, *response, &built, error)) return false;
    rc = api->respond(api->server, responder, built, VRAMD_OK, nullptr, flags, &e);
  }
  if (rc != VRAMD_OK) {
    *error = e.message;
    return false;
  }
  return true;
}

RequestState::RequestState(std::shared_ptr<ModelShared> model, VramdResponder* responder,
                           std::string id, VramdMemory preferred_output)
    : model_(std::move(model)),
      id_(std::move(id)),
      preferred_output_(preferred_output),
      responder_(responder) {}

void RequestState::set_outstanding(std::weak_ptr<OutstandingRequests> outstanding) {
  std::lock_guard<std::mutex> lock(mu_);
  outstanding_ = std::move(outstanding);
}

void RequestState::CheckLocked(bool has_response, uint32_t flags) const {
  if (flags != kFinal && flags != 0) {
    throw ModelException("Unable to send response. Unsupported flag provided.");
  }
  if (flags == 0 && !has_response) {
    throw ModelException(
        "Inference Response object must be provided when the response flags is set to zero.");
  }
  if (!model_->decoupled) {
    if (has_response && sent_ > 0) {
      throw ModelException(
          "Unable to send response. Non-decoupled model cannot send more than one response.");
    }
    if (!has_response && flags == kFinal && sent_ == 0) {
      throw ModelException(
          "Unable to send response. Non-decoupled model cannot send complete final before "
          "sending a response.");
    }
  }
  if (closed_) throw ModelException("Unable to send response. Response sender has been closed.");
}

PreparedResponse::~PreparedResponse() {
  if (built_ != nullptr) api_->response_delete(api_->server, built_);
}

std::unique_ptr<PreparedResponse> RequestState::Prepare(const PyInferResponse& response) {
  std::unique_ptr<PreparedResponse> prepared(new PreparedResponse());
  prepared->api_ = model_->server;
  std::lock_guard<std::mutex> lock(mu_);
  if (responder_ == nullptr || !model_->alive.load()) {
    throw ModelException("the request was already answered");
  }
  if (response.error) {
    prepared->code_ = CodeFromTriton(response.error->code);
    prepared->message_ = response.error->message;
    return prepared;
  }
  std::string error;
  if (!BuildResponse(*model_, responder_, preferred_output_, response, &prepared->built_,
                     &error)) {
    throw ModelException(error);
  }
  return prepared;
}

void RequestState::SendPrepared(std::unique_ptr<PreparedResponse> prepared, uint32_t flags) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckLocked(true, flags);
  if (responder_ == nullptr || !model_->alive.load()) {
    throw ModelException("the request was already answered");
  }
  const VramdServerApi* api = model_->server;
  VramdError e{};
  VramdResponse* built = std::exchange(prepared->built_, nullptr);  // respond takes it
  VramdCode rc = built != nullptr
                     ? api->respond(api->server, responder_, built, VRAMD_OK, nullptr, flags, &e)
                     : api->respond(api->server, responder_, nullptr, prepared->code_,
                                    prepared->message_.c_str(), flags, &e);
  if (rc != VRAMD_OK) throw ModelException(e.message);
  ++sent_;
  if (flags & kFinal) CloseLocked();
}

void RequestState::CheckSend(bool has_response, uint32_t flags) const {
  std::lock_guard<std::mutex> lock(mu_);
  CheckLocked(has_response, flags);
}

void RequestState::CloseLocked() {
  closed_ = true;
  responder_ = nullptr;
  if (auto outstanding = outstanding_.lock()) outstanding->Remove(this);
}

bool RequestState::RespondLocked(const PyInferResponse* response, uint32_t flags,
                                 std::string* error) {
  if (responder_ == nullptr || !model_->alive.load()) {
    *error = "the request was already answered";
    return false;
  }
  if (!RespondWith(*model_, responder_, preferred_output_, response, flags, error)) return false;
  if (response != nullptr) ++sent_;
  if (flags & kFinal) CloseLocked();
  return true;
}

void RequestState::Send(const PyInferResponse* response, uint32_t flags) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckLocked(response != nullptr, flags);
  std::string error;
  if (!RespondLocked(response, flags, &error)) throw ModelException(error);
}

void RequestState::FailIfOpen(VramdCode code, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || responder_ == nullptr || !model_->alive.load()) return;
  PyInferResponse failed;
  failed.error = std::make_shared<PyError>(PyError{message, TritonFromCode(code)});
  std::string error;
  if (!RespondLocked(&failed, kFinal, &error)) {
    // An error response after a non-decoupled model's one response is refused: end the
    // request with the final flag alone.
    if (!RespondLocked(nullptr, kFinal, &error)) {
      Log(model_->server, VRAMD_LOG_ERROR,
          "python model '" + model_->name + "': cannot answer request '" + id_ + "': " + error);
      CloseLocked();  // the responder is not used again
    }
  }
}

void RequestState::FinishNonDecoupled() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    if (sent_ > 0) {
      std::string error;
      if (RespondLocked(nullptr, kFinal, &error)) return;
      Log(model_->server, VRAMD_LOG_ERROR,
          "python model '" + model_->name + "': cannot complete request '" + id_ + "': " + error);
      CloseLocked();
      return;
    }
  }
  FailIfOpen(VRAMD_INTERNAL, "python model '" + model_->name +
                                 "' returned no response for request '" + id_ + "'");
}

bool RequestState::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

bool RequestState::IsCancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (responder_ == nullptr || !model_->alive.load()) return false;
  return model_->server->is_cancelled(model_->server->server, responder_) != 0;
}

void OutstandingRequests::Add(const std::shared_ptr<RequestState>& state) {
  std::lock_guard<std::mutex> lock(mu_);
  open_[state.get()] = state;
}

void OutstandingRequests::Remove(const RequestState* state) {
  std::shared_ptr<RequestState> dropped;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(state);
  if (it == open_.end()) return;
  dropped = std::move(it->second);
  open_.erase(it);
}

std::vector<std::shared_ptr<RequestState>> OutstandingRequests::TakeAll() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<RequestState>> all;
  for (auto& [key, state] : open_) all.push_back(std::move(state));
  open_.clear();
  return all;
}

}  // namespace vramd::python

