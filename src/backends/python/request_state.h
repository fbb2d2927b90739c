// The answering side of one request a model received: its VramdResponder and Triton's
// response-sender state (responses sent, closed after the final flag), shared by the Python
// InferenceRequest, its InferenceResponseSender and, for a request still open when execute
// returned (a decoupled model's), the instance's OutstandingRequests.
//
// Every response goes through Send, whichever way the model produced it (returned from execute
// or sent through the sender), so Triton's rules hold for both:
//   "Unable to send response. Unsupported flag provided."
//   "Inference Response object must be provided when the response flags is set to zero."
//   "Unable to send response. Non-decoupled model cannot send more than one response."
//   "Unable to send response. Non-decoupled model cannot send complete final before sending a
//    response."
//   "Unable to send response. Response sender has been closed."
// and what VramdServerApi::respond refuses is raised with the server's message.
//
// Threads: all methods are safe from any thread; Send and Fail* run without the GIL (they
// never touch Python).
#ifndef VRAMD_BACKENDS_PYTHON_REQUEST_STATE_H_
#define VRAMD_BACKENDS_PYTHON_REQUEST_STATE_H_

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "context.h"
#include "py_types.h"
#include "vramd/backend.h"

namespace vramd::python {

class OutstandingRequests;

// A response built (its outputs copied into the server's buffers) but not sent yet
// (RequestState::Prepare); dropped unsent by its destructor.
class PreparedResponse {
 public:
  ~PreparedResponse();
  PreparedResponse(const PreparedResponse&) = delete;
  PreparedResponse& operator=(const PreparedResponse&) = delete;

 private:
  friend class RequestState;
  PreparedResponse() = default;
  const VramdServerApi* api_ = nullptr;
  VramdResponse* built_ = nullptr;  // null for an error response
  VramdCode code_ = VRAMD_OK;
  std::string message_;
};

class RequestState {
 public:
  // `preferred_output`: VramdRequest::preferred_output_memory (host when the server's request
  // has none).
  RequestState(std::shared_ptr<ModelShared> model, VramdResponder* responder, std::string id,
               VramdMemory preferred_output);

  // Throws ModelException when a rule refuses the send (nothing is sent), or when the response
  // cannot be built or respond refuses it (nothing is sent; the request stays open).
  // `response` null: only the flags.
  void Send(const PyInferResponse* response, uint32_t flags);
  // Send in two steps, so that the model's Python objects (numpy arrays charged to the request,
  // numpy_ledger.h) can be dropped between them, before the final flag closes the request's
  // ledger owner: Prepare builds the response (no GIL needed; throws ModelException when it
  // cannot be built or the request is answered), SendPrepared sends it with Send's rules.
  std::unique_ptr<PreparedResponse> Prepare(const PyInferResponse& response);
  void SendPrepared(std::unique_ptr<PreparedResponse> prepared, uint32_t flags);
  // Checks Send's rules without sending (Triton checks every returned response before it sends
  // any). Throws ModelException.
  void CheckSend(bool has_response, uint32_t flags) const;
  // Answers with an error response and the final flag unless already final. Never throws.
  void FailIfOpen(VramdCode code, const std::string& message);
  // After a non-decoupled model's execute: a request sent its one response without the final
  // flag gets it now; one that got nothing gets an error. Never throws.
  void FinishNonDecoupled();

  bool closed() const;
  bool IsCancelled() const;
  bool decoupled() const { return model_->decoupled; }
  const std::string& id() const { return id_; }
  const std::shared_ptr<ModelShared>& model() const { return model_; }

  // Where the state registers while it is open after execute returned.
  void set_outstanding(std::weak_ptr<OutstandingRequests> outstanding);

 private:
  void CheckLocked(bool has_response, uint32_t flags) const;
  void CloseLocked();
  // Builds the response and responds; false with *error when nothing was sent.
  bool RespondLocked(const PyInferResponse* response, uint32_t flags, std::string* error);

  const std::shared_ptr<ModelShared> model_;
  const std::string id_;
  const VramdMemory preferred_output_;
  mutable std::mutex mu_;
  VramdResponder* responder_;  // null once final
  bool closed_ = false;
  size_t sent_ = 0;
  std::weak_ptr<OutstandingRequests> outstanding_;
};

// An instance's requests still open after their execute returned (decoupled models), kept so
// that instance_destroy answers each (nothing may leak).
class OutstandingRequests {
 public:
  void Add(const std::shared_ptr<RequestState>& state);
  void Remove(const RequestState* state);
  std::vector<std::shared_ptr<RequestState>> TakeAll();

 private:
  std::mutex mu_;
  std::unordered_map<const RequestState*, std::shared_ptr<RequestState>> open_;
};

// Builds `response` (outputs copied into the server's buffers: host ones, or for a consumer that
// prefers a GPU (`preferred`), GPU tensors into GPU buffers; parameters) and responds with
// `flags`; `response` null: only the flags; with an error: an error response. False with *error
// when nothing was sent. No GIL needed.
bool RespondWith(const ModelShared& model, VramdResponder* responder,
                 const VramdMemory& preferred, const PyInferResponse* response, uint32_t flags,
                 std::string* error);

}  // namespace vramd::python

#endif  // VRAMD_BACKENDS_PYTHON_REQUEST_STATE_H_
