#include "server/http/generate_answer.h"

#include <utility>

#include "server/http/generate_codec.h"
#include "server/http/http_status.h"
#include "server/http/infer_codec.h"

namespace vramd::http {
namespace {

constexpr const char* kEventStream = "text/event-stream; charset=utf-8";

HttpResponse JsonAnswer(unsigned status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse ErrorAnswer(const Status& status) {
  return JsonAnswer(HttpStatusFor(status.code()), EncodeError(status.message()));
}

}  // namespace

GenerateAnswer::GenerateAnswer(Responder respond, bool streaming, std::string model_name,
                               std::shared_ptr<RequestTrace> trace, trace::Tracer* tracer)
    : respond_(std::move(respond)),
      streaming_(streaming),
      model_name_(std::move(model_name)),
      trace_(std::move(trace)),
      tracer_(tracer) {}

void GenerateAnswer::Respond(HttpResponse r) {
  if (trace_ != nullptr) {
    trace_->Stamp(TracePoint::kSendStart);  // the first part's time: later stamps do not move it
    if (!r.more) r.written = [trace = trace_, tracer = tracer_] { tracer->Finish(trace); };
  }
  respond_(std::move(r));
}

void GenerateAnswer::SetDecoupled(bool decoupled) {
  MutexLock lock(mu_);
  decoupled_ = decoupled;
}

Result<std::string> GenerateAnswer::Encode(const Result<InferResponse>& response,
                                           int64_t model_version) const {
  if (!response.ok()) return response.status();
  return EncodeGenerateResponse(*response, model_name_, model_version);
}

void GenerateAnswer::SendEvent(const Result<std::string>& json, bool last) {
  const bool ok = json.ok();
  HttpResponse r;
  r.body = SseEvent(ok ? *json : EncodeError(json.status().message()));
  r.more = true;
  if (!started_) {
    started_ = true;
    // Triton's rule: the first response decides the status of the whole stream.
    r.status = ok ? 200 : 400;
    r.content_type = kEventStream;
  }
  Respond(std::move(r));
  if (last) EndStream();
}

void GenerateAnswer::EndStream() {
  HttpResponse r;
  if (!started_) {  // no response at all: an empty stream
    started_ = true;
    r.content_type = kEventStream;
  }
  r.more = false;
  Respond(std::move(r));
}

void GenerateAnswer::OnResponse(Result<InferResponse> response, int64_t model_version) {
  Result<std::string> json = Encode(response, model_version);
  MutexLock lock(mu_);
  if (finished_) return;
  if (streaming_) return SendEvent(json, /*last=*/false);
  // generate: one response is the answer; a second makes the answer an error (Finish).
  if (++responses_ != 1) return;
  first_ = json.ok() ? JsonAnswer(200, std::move(json).value()) : ErrorAnswer(json.status());
}

void GenerateAnswer::Finish(const Status& status, const InferResponse* response,
                            int64_t model_version) {
  // A non-decoupled model's one response is the answer; encoded outside the lock.
  bool decoupled;
  {
    MutexLock lock(mu_);
    decoupled = decoupled_;
  }
  std::optional<Result<std::string>> json;
  if (status.ok() && !decoupled && response != nullptr) json = Encode(*response, model_version);
  MutexLock lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (!status.ok()) {
    if (trace_ != nullptr) trace_->SetError(status.message());
    if (streaming_ && started_) return SendEvent(status, /*last=*/true);
    return Respond(ErrorAnswer(status));
  }
  if (streaming_) {
    if (json) return SendEvent(*json, /*last=*/true);
    return EndStream();
  }
  if (json) {
    return Respond(json->ok() ? JsonAnswer(200, std::move(*json).value())
                               : ErrorAnswer(json->status()));
  }
  if (responses_ == 1 && first_) return Respond(std::move(*first_));
  Respond(ErrorAnswer(Status::Internal(
      "generate expects model to produce exactly 1 response, use generate stream for model "
      "that generates various number of responses")));
}

}  // namespace vramd::http
