#include "runtime/request_responder.h"

#include <fmt/format.h>

#include <chrono>

#include "runtime/batch_executor.h"
#include "runtime/tensor_memory.h"
#include "runtime/trace_points.h"

namespace vramd::runtime {
namespace {

uint64_t Ns(SchedulerClock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

}  // namespace

RequestResponder::RequestResponder(const BatchExecutor* executor, bool decoupled,
                                   QueuedRequest queued, RequestOwner owner,
                                   SchedulerClock::time_point execution_start)
    : executor_(executor),
      decoupled_(decoupled),
      execution_start_(execution_start),
      request_(std::move(queued.request)),
      done_(std::move(queued.done)),
      owner_(std::move(owner)),
      arrival_(queued.arrival),
      enqueued_(queued.enqueued) {}

RequestResponder::~RequestResponder() {
  {
    // Answered: the final response may have let the version go (its outcome held it), and a
    // backend may drop its responder only after that, from its own thread, so nothing of the
    // executor may be touched here (ASan: RequestListsTest.AResponseMayComeAfterTheCall...).
    MutexLock lock(mu_);
    if (final_) return;
  }
  Fail(Status::Internal(fmt::format(
      "{}: the backend released the request without sending its final response",
      executor_->where())));
}

bool RequestResponder::IsCancelled() const {
  return request_->cancel != nullptr && request_->cancel->cancelled();
}

memory::OwnerId RequestResponder::OpenOwner(void* self) {
  auto* responder = static_cast<RequestResponder*>(self);
  MutexLock lock(responder->mu_);
  if (responder->final_) return memory::kNoOwner;
  return responder->owner_.lazy_owner()->Open();
}

Result<InferResponse> RequestResponder::Shape(Result<backends::BackendResponse> response) const {
  if (!response.ok()) return response.status().WithContext(executor_->where());
  // GPU outputs stay on the GPU only for a BLS call that takes them there and one response; a
  // streamed response may outlive the request's owner, to which they are charged.
  if (request_->output_gpu == kOnHost || (decoupled_ && request_->stream)) {
    Status moved = MoveToHost(&response->outputs);
    if (!moved.ok()) return moved.WithContext(executor_->where());
  }
  auto outputs = executor_->ShapeOutputs(*request_, std::move(response->outputs));
  if (!outputs.ok()) return outputs.status();
  InferResponse shaped;
  shaped.id = request_->id;
  shaped.model_name = executor_->model_name();
  shaped.model_version = executor_->version();
  shaped.outputs = std::move(outputs).value();
  shaped.parameters = std::move(response->parameters);
  return shaped;
}

Status RequestResponder::Respond(std::optional<Result<backends::BackendResponse>> response,
                                 bool final) {
  std::optional<Completion> completion;
  {
    MutexLock lock(mu_);
    if (final_) {
      return Status::InvalidArgument(fmt::format(
          "{}: the request was already completed (its final response was sent)",
          executor_->where()));
    }
    if (!decoupled_) {
      if (response.has_value() && responses_ > 0) {
        return Status::InvalidArgument(fmt::format(
            "{}: a model that is not decoupled sends exactly one response per request; this "
            "would be its second",
            executor_->where()));
      }
      if (!response.has_value() && final && responses_ == 0) {
        // Triton's wording (python_backend's response sender test).
        return Status::InvalidArgument(
            "Non-decoupled model cannot send complete final before sending a response");
      }
    }
    if (response.has_value()) {
      ++responses_;
      Result<InferResponse> shaped = Shape(std::move(*response));
      if (decoupled_ && request_->stream) {
        if (!shaped.ok()) streamed_error_ = true;
        // Under the lock, so the stream sees responses in the order they were sent; a stream
        // callback only hands the response to its front end (core/infer_request.h).
        request_->stream(std::move(shaped));
      } else if (!held_.has_value()) {
        held_ = std::move(shaped);
      } else if (held_->ok()) {
        held_ = Status::InvalidArgument(fmt::format(
            "{}: the model is decoupled and sent more than one response, but this request "
            "takes one (use generate_stream, a gRPC stream or a decoupled BLS call)",
            executor_->where()));
      }
    }
    if (final) completion = Finish();
  }
  if (completion.has_value()) completion->Run();
  return Status::Ok();
}

void RequestResponder::Fail(const Status& status) {
  std::optional<Completion> completion;
  {
    MutexLock lock(mu_);
    if (final_) return;
    held_ = status;
    // A streamed request's error ends its stream as an error, not as a silent final flag.
    if (decoupled_ && request_->stream) {
      streamed_error_ = true;
      request_->stream(status);
    }
    completion = Finish();
  }
  completion->Run();
}

RequestResponder::Completion RequestResponder::Finish() {
  final_ = true;
  const auto end = SchedulerClock::now();
  const uint64_t request_ns = Ns(end - arrival_);
  InferenceStatistics* stats = executor_->stats();
  Completion completion;
  completion.done = std::move(done_);
  const bool streamed = decoupled_ && request_->stream;
  if (request_->trace) {
    const Status status = held_.has_value() && !held_->ok() ? held_->status() : Status::Ok();
    StampExecution(*request_, executor_->version(), 0,
                   {arrival_, enqueued_, execution_start_, {}, {}, end}, executor_->memory(),
                   memory::kNoOwner, owner_.lazy_owner(), status);
  }
  if (!streamed && held_.has_value() && !held_->ok()) {
    stats->RecordFailure(request_ns, FailureReason::kBackend, held_->status().code());
    completion.outcome = held_->status();
    return completion;
  }
  if (!streamed && !held_.has_value()) {
    // A decoupled model may complete a request without any response; a request that takes
    // one must still get an answer.
    stats->RecordFailure(request_ns, FailureReason::kBackend);
    completion.outcome = Status::Internal(fmt::format(
        "{}: the model completed the request without sending a response", executor_->where()));
    return completion;
  }
  if (streamed_error_) {
    stats->RecordFailure(request_ns, FailureReason::kBackend);
  } else {
    stats->RecordSuccess(request_ns, Ns(execution_start_ - enqueued_), 0,
                         Ns(end - execution_start_), 0);
  }
  InferOutcome outcome;
  outcome.request_owner = std::move(owner_);
  if (held_.has_value()) {
    outcome.response = std::move(*held_).value();
  } else {
    outcome.response.id = request_->id;
    outcome.response.model_name = executor_->model_name();
    outcome.response.model_version = executor_->version();
  }
  completion.outcome = std::move(outcome);
  return completion;
}

}  // namespace vramd::runtime
