// RequestResponder: how one request of a request list (backends::Responder) is answered, for
// backends that take requests unjoined (Backend::TakesRequestLists), under Triton's rules:
//   - a model that is not decoupled sends exactly one response (data or error), with or before
//     the final flag; a final flag before any response, and a second response, are refused;
//   - a decoupled model sends any number of responses, then the final flag (alone or with its
//     last response). Each response goes to the request's stream (InferRequest::stream) as it
//     comes; a request without a stream (one that takes a single response) gets the first as
//     its answer, and a second fails it;
//   - nothing after the final flag.
// The final flag answers the request's InferCallback, once: with the held response, or, for a
// streamed request, an outcome without outputs. Each response's outputs are shaped as the
// batch path shapes them (reshape, the outputs the request asked for in its order, top classes)
// by BatchExecutor::ShapeOutputs.
//
// A responder dropped without its final flag answers its request with an Internal error
// naming the model, so no request is left unanswered; Fail answers it with an error (the
// backend's execute failed) unless it was answered already.
//
// The request's ledger owner (a lazy RequestOwner under the instance) lives in the responder
// until the final flag, then in the outcome, as in the batch path.
//
// Lifetime: the BatchExecutor must outlive the responder. It does: a version's instances
// finalize their responders before they are destroyed (include/vramd/backend.h), and the
// executor outlives the instances (loaded_model.h).
//
// Thread safety: Respond, IsCancelled and Fail are safe from any thread. Responses reach the
// stream in the order their Respond calls took the responder's lock.
#pragma once

#include <optional>
#include <string>

#include "backends/backend.h"
#include "core/mutex.h"
#include "runtime/request_owner.h"
#include "runtime/request_queue.h"

namespace vramd::runtime {

class BatchExecutor;

class RequestResponder final : public backends::Responder {
 public:
  // `execution_start`: when the execution that received the request began (its queue time
  // ends there).
  RequestResponder(const BatchExecutor* executor, bool decoupled, QueuedRequest queued,
                   RequestOwner owner, SchedulerClock::time_point execution_start);
  ~RequestResponder() override;
  RequestResponder(const RequestResponder&) = delete;
  RequestResponder& operator=(const RequestResponder&) = delete;

  Status Respond(std::optional<Result<backends::BackendResponse>> response, bool final) override
      EXCLUDES(mu_);
  bool IsCancelled() const override;
  bool decoupled() const override { return decoupled_; }

  // Answers the request with `status` unless its final flag was sent; a no-op otherwise.
  void Fail(const Status& status) EXCLUDES(mu_);

  // The request's ledger owner, opened now (ListedRequest::open_owner); kNoOwner once the
  // request is answered. `self` is a RequestResponder.
  static memory::OwnerId OpenOwner(void* self);

 private:
  // What answering the request takes, moved out under mu_ and run outside it (the callback
  // may do anything a front end does).
  struct Completion {
    InferCallback done;
    Result<InferOutcome> outcome{Status::Internal("unset")};
    void Run() { done(std::move(outcome)); }
  };
  // The request's answer, from what is held; called once, with the final flag.
  Completion Finish() REQUIRES(mu_);
  // `response` as the client gets it: shaped, named, or the error in context.
  Result<InferResponse> Shape(Result<backends::BackendResponse> response) const;

  const BatchExecutor* const executor_;
  const bool decoupled_;
  const SchedulerClock::time_point execution_start_;
  const std::shared_ptr<const InferRequest> request_;
  Mutex mu_;
  InferCallback done_ GUARDED_BY(mu_);
  RequestOwner owner_ GUARDED_BY(mu_);
  SchedulerClock::time_point arrival_, enqueued_;
  bool final_ GUARDED_BY(mu_) = false;
  size_t responses_ GUARDED_BY(mu_) = 0;
  // The answer of a request without a stream: its first response, or the error that ends it.
  std::optional<Result<InferResponse>> held_ GUARDED_BY(mu_);
  bool streamed_error_ GUARDED_BY(mu_) = false;  // an error response went to the stream
};

}  // namespace vramd::runtime
