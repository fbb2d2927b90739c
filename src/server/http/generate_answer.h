// GenerateAnswer: the HTTP answer of one generate or generate_stream request, assembled from
// what the model sends (internal to server/http; KServeRoutes makes one per request). Triton's
// behaviour (HTTPAPIServer::GenerateRequestClass in src/http_server.cc), and where vramd
// differs:
//
// generate_stream: each response is one server-sent event (generate_codec.h), written as it
// arrives; an error response is an event {"error": "<message>"}. The first event sets the
// status: 200, or 400 when it is an error (Triton's rule; later errors arrive under the 200).
// The content type is "text/event-stream; charset=utf-8". The final flag ends the stream. A
// request that fails before any event (unknown model, a body that does not parse, a model's
// error on a model that is not decoupled) is answered as the other endpoints answer errors:
// {"error": ...} as JSON with the status of HttpStatusFor. A decoupled model that ends with no
// response gives an empty 200 stream, as Triton.
//
// generate: one JSON response. A decoupled model must send exactly one response; otherwise
// the answer is Triton's error "generate expects model to produce exactly 1 response, use
// generate stream for model that generates various number of responses" (INTERNAL: Triton
// writes it after a 200 head already sent; vramd answers only at the end, so with 500).
//
// Calls: OnResponse for each response of a decoupled model (InferRequest::stream), in order,
// then Finish once (the request's InferCallback). Neither blocks: they encode and hand the
// bytes to the Responder, which queues them for the connection's strand.
//
// Tracing: a traced request's HTTP_SEND_START is stamped as its first part (or whole answer)
// goes to the Responder, and the tracer finishes the trace once the last has been written.
//
// Thread safety: OnResponse and Finish may be called from any thread (the runtime calls them
// one at a time, in order; the mutex keeps that order up to the Responder even if not).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <memory>

#include "core/infer_request.h"
#include "core/mutex.h"
#include "core/request_trace.h"
#include "core/status.h"
#include "server/http/http_server.h"
#include "server/trace/tracer.h"

namespace vramd::http {

class GenerateAnswer {
 public:
  // `model_name` names the model in responses that leave their own name empty. `trace`: the
  // request's, or null when it is not traced; `tracer` finishes it (not null with a trace).
  GenerateAnswer(Responder respond, bool streaming, std::string model_name,
                 std::shared_ptr<RequestTrace> trace = nullptr, trace::Tracer* tracer = nullptr);

  // The model is decoupled (its responses arrive through OnResponse). Called by the build step,
  // before the request is submitted.
  void SetDecoupled(bool decoupled) EXCLUDES(mu_);

  // One response of a decoupled model; `model_version` stands in where it has none.
  void OnResponse(Result<InferResponse> response, int64_t model_version) EXCLUDES(mu_);

  // The request's end: its failure, or its response (a non-decoupled model's answer; for a
  // decoupled model, only the end of its responses, whose outputs are ignored).
  void Finish(const Status& status, const InferResponse* response, int64_t model_version)
      EXCLUDES(mu_);

 private:
  // The generate JSON of one response, or its failure (the model's error, or one encoding).
  Result<std::string> Encode(const Result<InferResponse>& response, int64_t model_version) const;
  // Sends `json` (or its error) as the next event, and then the end of the stream if `last`.
  void SendEvent(const Result<std::string>& json, bool last) REQUIRES(mu_);
  void EndStream() REQUIRES(mu_);
  // Every answer and part goes through here: the trace's stamps ride on it.
  void Respond(HttpResponse r) REQUIRES(mu_);

  const Responder respond_;
  const bool streaming_;
  const std::string model_name_;
  const std::shared_ptr<RequestTrace> trace_;
  trace::Tracer* const tracer_;

  Mutex mu_;
  bool decoupled_ GUARDED_BY(mu_) = false;
  bool started_ GUARDED_BY(mu_) = false;  // generate_stream: the first event is out
  bool finished_ GUARDED_BY(mu_) = false;
  // generate of a decoupled model: how many responses came, and the first one's answer.
  size_t responses_ GUARDED_BY(mu_) = 0;
  std::optional<HttpResponse> first_ GUARDED_BY(mu_);
};

}  // namespace vramd::http
