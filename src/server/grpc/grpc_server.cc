#include "server/grpc/grpc_server.h"

#include <absl/synchronization/mutex.h>
#include <fmt/format.h>
#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cstdlib>

#include <algorithm>
#include <charconv>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "server/grpc/grpc_service.grpc.pb.h"
#include "server/grpc/health.grpc.pb.h"

namespace vramd::grpc_server {
namespace {

// ModelInfer is served raw (InferCall): its answer is serialized by SerializeInferResponse.
using Service = inference::GRPCInferenceService::WithRawMethod_ModelInfer<
    inference::GRPCInferenceService::AsyncService>;
using HealthService = grpc::health::v1::Health::AsyncService;

// gRPC's default polling engine on Linux (epoll1) has whichever queue thread is polling read
// every connection, then hand the call to the thread of the queue it was matched on and back
// for the answer: a futex wake-up or two per call, which on a virtual machine costs more than
// the call. The poll engine gives each connection to one queue's pollset at accept (round
// robin) and the server matches that connection's calls to that queue first, so one thread
// reads, runs and answers each call, as the HTTP server's threads do (docs/benchmarks.md:
// 1.75x the requests at c=1, a fifth less CPU per call). Set before gRPC initializes, which reads it once: at static
// initialization, before any thread could read the environment. An operator's own
// GRPC_POLL_STRATEGY is kept.
const bool kPollEngineChosen = [] { return setenv("GRPC_POLL_STRATEGY", "poll", 0) == 0; }();

constexpr int kInferListeners = 16;

// Set on the server's queue threads: an answer produced there is sent at once; one produced
// elsewhere (an instance thread) is handed to its call's queue thread first (InferCall).
thread_local bool tls_on_queue_thread = false;

// A completion-queue tag: one call's state machine. Proceed runs on a queue thread for each
// event of the call and says whether the call still waits on gRPC (kept) or is done (freed).
class Call {
 public:
  virtual ~Call() = default;
  virtual bool Proceed(bool ok) = 0;
};

// A completion-queue tag that is a member of a streaming call (never freed by the queue): each
// event runs the call's handler for that kind of operation.
template <typename Owner>
class MemberOp final : public Call {
 public:
  MemberOp(Owner* call, void (Owner::*on)(bool)) : call_(call), on_(on) {}
  bool Proceed(bool ok) override {
    (call_->*on_)(ok);
    return true;
  }

 private:
  Owner* const call_;
  void (Owner::*const on_)(bool);
};

// A streaming call, owned by the server's registry from its first wait for a call until it is
// done with gRPC. Stop runs once, when the server starts shutting down.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual void Stop() {}
};

}  // namespace

class GrpcServer::Impl {
 public:
  Impl(const Options& options, const GrpcRoutes* routes) : options_(options), routes_(routes) {}

  Status Start() {
    // Debian's abseil records every lock of gRPC's mutexes in a deadlock-detection graph, a
    // twentieth of the server's time per call; gRPC's own builds have it off.
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
    grpc::ServerBuilder builder;
    int selected_port = 0;
    const std::string address = fmt::format("{}:{}", options_.address, options_.port);
    builder.AddListeningPort(address, Credentials(), &selected_port);
    builder.RegisterService(&service_);
    builder.RegisterService(&health_);
    builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
    builder.SetMaxSendMessageSize(options_.max_message_bytes);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, options_.keepalive_time_ms);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, options_.keepalive_timeout_ms);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                               options_.keepalive_permit_without_calls ? 1 : 0);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA,
                               options_.http2_max_pings_without_data);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                               options_.http2_min_recv_ping_interval_without_data_ms);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, options_.http2_max_ping_strikes);
    if (options_.max_connection_age_ms > 0) {
      builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, options_.max_connection_age_ms);
    }
    if (options_.max_connection_age_grace_ms > 0) {
      builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                                 options_.max_connection_age_grace_ms);
    }
    for (const auto& [name, value] : options_.channel_args) {
      builder.AddChannelArgument(name, value);
      spdlog::info("gRPC channel argument {}={}", name, value);
    }
    int threads = options_.threads;
    // As many as the HTTP server's by default: each queue's thread also runs the requests it
    // takes on the scheduler's fast path, so fewer threads than cores cap the request rate
    // (4 threads served 34 k req/s on the H200 machine where HTTP's 16 served 162 k).
    if (threads <= 0) threads = static_cast<int>(std::max(std::thread::hardware_concurrency(), 1u));
    for (int i = 0; i < threads; ++i) cqs_.push_back(builder.AddCompletionQueue());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || selected_port == 0) {
      server_.reset();
      for (auto& cq : cqs_) cq->Shutdown();
      DrainQueues();
      return Status::Unavailable(fmt::format("gRPC: cannot listen on {}{}", address,
                                             options_.tls ? " with TLS" : ""));
    }
    port_ = selected_port;
    {
      WriterLock lock(accepting_mu_);
      accepting_ = true;
    }
    for (auto& cq : cqs_) ListenAll(cq.get());
    for (auto& cq : cqs_) {
      threads_.emplace_back([cq = cq.get()] { Drain(cq); });
    }
    return Status::Ok();
  }

  int port() const { return port_; }

  std::shared_ptr<grpc::ServerCredentials> Credentials() const {
    if (!options_.tls.has_value()) return grpc::InsecureServerCredentials();
    const Options::Tls& tls = *options_.tls;
    grpc::SslServerCredentialsOptions ssl(
        tls.mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_root_certs = tls.root_certs;
    ssl.pem_key_cert_pairs.push_back({tls.server_key, tls.server_cert});
    return grpc::SslServerCredentials(ssl);
  }

  void Shutdown() EXCLUDES(mu_) {
    if (server_ == nullptr) return;
    // Health watches would otherwise hold the shutdown for its whole drain timeout.
    std::vector<std::shared_ptr<Stream>> open;
    {
      MutexLock lock(mu_);
      stopping_ = true;
      for (auto& [key, stream] : streams_) open.push_back(stream);
    }
    for (auto& stream : open) stream->Stop();
    open.clear();
    server_->Shutdown(std::chrono::system_clock::now() + options_.drain_timeout);
    {
      // No call is matched from here on; what the runtime still owes comes (exactly once).
      MutexLock lock(mu_);
      // Every stream ends too: the server's shutdown cancelled those still open, so their
      // operations complete and each finishes.
      lock.Wait(owed_cv_, [this]() REQUIRES(mu_) { return owed_.load() == 0 && streams_.empty(); });
    }
    {
      WriterLock lock(accepting_mu_);
      accepting_ = false;
    }
    for (auto& cq : cqs_) cq->Shutdown();
    for (auto& t : threads_) t.join();
    threads_.clear();
    server_.reset();
  }

  // Triton's answer to a call of a restricted category without the restriction's metadata
  // (server/access/restricted_apis.h); nullopt lets the call through.
  std::optional<grpc::Status> Refusal(const grpc::ServerContext& context,
                                      server::ApiCategory category) const {
    if (options_.restricted == nullptr) return std::nullopt;
    const auto* restriction = options_.restricted->Find(category);
    if (restriction == nullptr) return std::nullopt;
    const auto& metadata = context.client_metadata();
    auto it = metadata.find(restriction->header);  // the first of the key counts
    if (it != metadata.end() &&
        std::string_view(it->second.data(), it->second.size()) == restriction->value) {
      return std::nullopt;
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        server::RestrictedApis::RefusalMessage(*restriction, /*grpc=*/true));
  }

  // What an inference call brings besides its message (GrpcRoutes::CallContext): read from its
  // metadata, the trace context and what --grpc-header-forward-pattern forwards.
  GrpcRoutes::CallContext ContextOf(const grpc::ServerContext& context,
                                    std::shared_ptr<CancelFlag> cancel) const {
    GrpcRoutes::CallContext call;
    call.received = std::chrono::steady_clock::now();
    call.cancel = std::move(cancel);
    const auto& metadata = context.client_metadata();  // keys are lowercase in gRPC
    if (auto it = metadata.find("traceparent"); it != metadata.end()) {
      call.traceparent.assign(it->second.data(), it->second.size());
    }
    if (options_.forward_headers != nullptr) {
      for (const auto& [key, value] : metadata) {
        if (auto parameter = options_.forward_headers->Parameter(
                std::string_view(key.data(), key.size()),
                std::string_view(value.data(), value.size()))) {
          call.forwarded.push_back(std::move(*parameter));
        }
      }
    }
    return call;
  }

  // An inference call's answers are compressed as Options::infer_compression_level says.
  void CompressAnswers(grpc::ServerContext* context) const {
    using Level = Options::CompressionLevel;
    switch (options_.infer_compression_level) {
      case Level::kNone:
        return;
      case Level::kLow:
        return context->set_compression_level(GRPC_COMPRESS_LEVEL_LOW);
      case Level::kMedium:
        return context->set_compression_level(GRPC_COMPRESS_LEVEL_MED);
      case Level::kHigh:
        return context->set_compression_level(GRPC_COMPRESS_LEVEL_HIGH);
    }
  }

  Service* service() { return &service_; }
  HealthService* health() { return &health_; }
  const GrpcRoutes* routes() const { return routes_; }

  // Runs `enqueue` (a RequestX of the service) unless the queues are closing: a call that got
  // its request asks for the next one, which must not reach a queue being shut down.
  template <typename Enqueue>
  void IfAccepting(Enqueue enqueue) EXCLUDES(accepting_mu_) {
    ReaderLock lock(accepting_mu_);
    if (accepting_) enqueue();
  }

  // Streams live here from their first wait for a call until they are done with gRPC;
  // `enqueue` asks for the call, as IfAccepting's does.
  template <typename StreamT, typename Enqueue>
  void ListenStream(std::unique_ptr<StreamT> stream, Enqueue enqueue)
      EXCLUDES(mu_, accepting_mu_) {
    ReaderLock accepting(accepting_mu_);
    MutexLock lock(mu_);
    if (!accepting_) return;
    StreamT* raw = stream.get();
    streams_.emplace(raw, std::shared_ptr<Stream>(std::move(stream)));
    enqueue(raw);
  }
  // Whether Shutdown has begun (streams accepted from then on stop at once).
  bool stopping() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return stopping_;
  }
  void RemoveStream(const void* stream) EXCLUDES(mu_) {
    std::shared_ptr<Stream> gone;  // destroyed after the lock is let go
    MutexLock lock(mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;
    gone = std::move(it->second);
    streams_.erase(it);
    if (streams_.empty()) owed_cv_.notify_all();
  }

  // Every call's handler runs between the two: the counter is an atomic so that calls on
  // different queue threads never meet on a lock; only the last answer takes mu_, so that
  // Shutdown, which waits under it, cannot go on (and free this) before Paid is done.
  void Owe() { owed_.fetch_add(1); }
  void Paid() EXCLUDES(mu_) {
    int64_t owed = owed_.load();
    while (owed > 1) {
      if (owed_.compare_exchange_weak(owed, owed - 1)) return;
    }
    MutexLock lock(mu_);
    if (owed_.fetch_sub(1) == 1) owed_cv_.notify_all();
  }

 private:
  void ListenAll(grpc::ServerCompletionQueue* cq);

  static void Drain(grpc::ServerCompletionQueue* cq) {
    tls_on_queue_thread = true;
    void* tag = nullptr;
    bool ok = false;
    while (cq->Next(&tag, &ok)) {
      std::unique_ptr<Call> call(static_cast<Call*>(tag));
      if (call->Proceed(ok)) static_cast<void>(call.release());  // still the queue's
    }
  }
  void DrainQueues() {
    for (auto& cq : cqs_) Drain(cq.get());
  }

  const Options options_;
  const GrpcRoutes* const routes_;
  Service service_;
  HealthService health_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  Mutex mu_;
  std::condition_variable owed_cv_;
  std::atomic<int64_t> owed_{0};  // calls handed to a handler, not yet answered
  SharedMutex accepting_mu_ ACQUIRED_BEFORE(mu_);
  bool accepting_ GUARDED_BY(accepting_mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::map<const void*, std::shared_ptr<Stream>> streams_ GUARDED_BY(mu_);
  std::vector<std::thread> threads_;  // joined by Shutdown
};

namespace {

// The service an RPC belongs to, as the server holds it.
template <typename AsyncService>
AsyncService* ServiceOf(GrpcServer::Impl* server);
template <>
Service* ServiceOf<Service>(GrpcServer::Impl* server) {
  return server->service();
}
template <>
HealthService* ServiceOf<HealthService>(GrpcServer::Impl* server) {
  return server->health();
}

// One unary RPC: waits for a request, asks for the next, runs the handler, sends its answer.
template <typename AsyncService, typename Request, typename Response>
class UnaryCall final : public Call {
 public:
  using Enqueue = void (AsyncService::*)(grpc::ServerContext*, Request*,
                                         grpc::ServerAsyncResponseWriter<Response>*,
                                         grpc::CompletionQueue*, grpc::ServerCompletionQueue*,
                                         void*);
  using Handler = void (GrpcRoutes::*)(std::shared_ptr<const Request>, Reply<Response>) const;

  UnaryCall(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq, Enqueue enqueue,
            Handler handler, server::ApiCategory category)
      : server_(server), cq_(cq), enqueue_(enqueue), handler_(handler), category_(category) {}

  static void Listen(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq, Enqueue enqueue,
                     Handler handler, server::ApiCategory category) {
    server->IfAccepting([&] {
      auto call = std::make_unique<UnaryCall>(server, cq, enqueue, handler, category);
      UnaryCall* tag = call.release();  // the queue's until it hands the tag back
      (ServiceOf<AsyncService>(server)->*enqueue)(&tag->context_, tag->request_.get(),
                                                  &tag->writer_, cq, cq, tag);
    });
  }

  bool Proceed(bool ok) override {
    if (answered_ || !ok) return false;  // sent, or the server is shutting down
    Listen(server_, cq_, enqueue_, handler_, category_);
    server_->Owe();
    if (auto refused = server_->Refusal(context_, category_)) {
      Answer(std::move(*refused), Response());
      return true;
    }
    (server_->routes()->*handler_)(request_, [this](grpc::Status status, Response response) {
      Answer(std::move(status), std::move(response));
    });
    return true;
  }

 private:
  void Answer(grpc::Status status, Response response) {
    // Once Finish is queued the queue's thread may free this call at any moment: nothing of
    // it is touched after. The server outlives every answer it is owed.
    GrpcServer::Impl* server = server_;
    answered_ = true;
    response_ = std::move(response);
    if (status.ok()) {
      writer_.Finish(response_, status, this);
    } else {
      writer_.FinishWithError(status, this);
    }
    server->Paid();
  }

  GrpcServer::Impl* const server_;
  grpc::ServerCompletionQueue* const cq_;
  const Enqueue enqueue_;
  const Handler handler_;
  const server::ApiCategory category_;
  grpc::ServerContext context_;
  std::shared_ptr<Request> request_ = std::make_shared<Request>();
  Response response_;
  grpc::ServerAsyncResponseWriter<Response> writer_{&context_};
  bool answered_ = false;  // read on the queue's thread after the Finish it precedes
};

// One ModelInfer: as a UnaryCall, but the request is parsed here (a malformed message is
// INVALID_ARGUMENT, naming the RPC) and the answer written by SerializeInferResponse, so that
// large outputs go to the socket from the model's buffers. gRPC's notice that the call is over
// says whether the client cancelled it, which the request's CancelFlag then tells the model;
// the call is freed once both that notice and its Finish have come (both on its queue's thread).
class InferCall final : public Call {
 public:
  InferCall(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq) : server_(server), cq_(cq) {}

  static void Listen(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq) {
    server->IfAccepting([&] {
      auto call = std::make_unique<InferCall>(server, cq);
      InferCall* tag = call.release();  // the queue's until it hands the tag back
      tag->context_.AsyncNotifyWhenDone(&tag->done_);  // before the call starts, as gRPC asks
      server->service()->RequestModelInfer(&tag->context_, &tag->request_, &tag->writer_, cq, cq,
                                           tag);
    });
  }

  bool Proceed(bool ok) override {
    switch (state_) {
      case State::kListening:
        if (!ok) return false;  // the server is shutting down; a call never started gets no notice
        Listen(server_, cq_);
        server_->Owe();
        Run();
        return true;
      case State::kHandedOver:
        // The alarm fires with ok false only when cancelled, which nothing does; the answer is
        // owed either way.
        Answer();
        return true;
      case State::kFinishing:
        finished_ = true;
        return !noticed_;  // kept for the notice still to come
    }
    return false;
  }

 private:
  enum class State { kListening, kHandedOver, kFinishing };

  void Run() {
    // When the call and its message arrived, before the parse.
    GrpcRoutes::CallContext call = server_->ContextOf(context_, cancel_);
    if (auto refused = server_->Refusal(context_, server::ApiCategory::kInference)) {
      status_ = std::move(*refused);
      return Answer();
    }
    server_->CompressAnswers(&context_);
    auto message = std::make_shared<inference::ModelInferRequest>();
    if (!grpc::SerializationTraits<inference::ModelInferRequest>::Deserialize(&request_,
                                                                            message.get())
             .ok()) {
      status_ = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             "ModelInfer: the request is not a ModelInferRequest message");
      return Answer();
    }
    server_->routes()->ModelInfer(std::move(message), std::move(call),
                                  [this](grpc::Status status, EncodedInferResponse response) {
                                    status_ = std::move(status);
                                    response_parts_ = std::move(response);
                                    if (tls_on_queue_thread) return Answer();
                                    HandOver();
                                  });
  }

  void OnDone(bool) {
    if (context_.IsCancelled()) cancel_->Cancel();
    noticed_ = true;
    if (finished_) std::unique_ptr<InferCall> gone(this);  // the Finish came first
  }

  // An instance thread produced the answer (the request waited in the queue for an instance).
  // Serializing it and starting gRPC's send there would keep that thread from its next request
  // for as long (on the H200 machine two instance threads so held capped 16 clients at half
  // of HTTP's req/s), so the alarm, due at once, wakes this call's queue thread to do it: the
  // instance thread pays one wake-up, as the HTTP server's hand-off to its I/O thread does.
  void HandOver() {
    state_ = State::kHandedOver;
    alarm_.emplace();
    alarm_->Set(cq_, gpr_time_0(GPR_CLOCK_MONOTONIC), this);
  }

  void Answer() {
    // As UnaryCall's reply: nothing of this call is touched once Finish is queued.
    GrpcServer::Impl* server = server_;
    state_ = State::kFinishing;
    if (status_.ok()) {
      response_ = SerializeInferResponse(std::move(response_parts_));
      writer_.Finish(response_, status_, this);
    } else {
      writer_.FinishWithError(status_, this);
    }
    server->Paid();
  }

  GrpcServer::Impl* const server_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> writer_{&context_};
  State state_ = State::kListening;
  grpc::Status status_;
  EncodedInferResponse response_parts_;
  // Made only for a hand-over: a grpc::Alarm takes gRPC's global initialization lock when it is
  // made and again when it goes, which every call would otherwise pay.
  std::optional<grpc::Alarm> alarm_;
  const std::shared_ptr<CancelFlag> cancel_ = std::make_shared<CancelFlag>();
  MemberOp<InferCall> done_{this, &InferCall::OnDone};
  // Both read and written on the queue's thread only.
  bool finished_ = false;  // the Finish has completed
  bool noticed_ = false;   // gRPC's done notice has come
};

// One ModelStreamInfer stream: requests are read one after another and each is handed to the
// routes as it comes (several may run at once); their responses are written in the order they
// are produced, one write at a time; once the client has sent its last request and every
// request has had its last response, the stream ends with OK. A stream is kept in the server's
// registry until its Finish completes, and each of its operations has a tag of its own.
//
// Reading waits while kPendingToPause responses wait to be written or kInFlightToPause requests
// are unanswered, and goes on as they drain: a client that sends and does not read (or reads
// slower) would otherwise have the server hold every answer it made; paused, gRPC's flow
// control holds the client's sends instead.
class StreamCall final : public Stream {
 public:
  using Response = inference::ModelStreamInferResponse;
  static constexpr size_t kPendingToPause = 16;
  static constexpr int64_t kInFlightToPause = 1024;

  StreamCall(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq) : server_(server), cq_(cq) {}

  static void Listen(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq) {
    server->ListenStream(std::make_unique<StreamCall>(server, cq), [&](StreamCall* call) {
      call->context_.AsyncNotifyWhenDone(&call->done_);  // before the call starts, as gRPC asks
      server->service()->RequestModelStreamInfer(&call->context_, &call->stream_, cq, cq,
                                                 &call->accepted_);
    });
  }

 private:
  using Op = MemberOp<StreamCall>;

  void OnAccepted(bool ok) EXCLUDES(mu_) {
    if (!ok) return server_->RemoveStream(this);  // shutting down: never started, so no notice
    Listen(server_, cq_);
    if (auto refused = server_->Refusal(context_, server::ApiCategory::kInference)) {
      MutexLock lock(mu_);  // refused before any request is read, as Triton does
      finishing_ = true;
      stream_.Finish(*refused, &finish_);
      return;
    }
    server_->CompressAnswers(&context_);
    // The stream's trace context and forwarded metadata, for each of its requests.
    stream_context_ = server_->ContextOf(context_, cancel_);
    MutexLock lock(mu_);
    ReadIfRoom();
  }

  // Starts the next read unless one is in progress, the client has sent its last request, or
  // the stream is full (the class comment); a drained write or an answered request calls again.
  void ReadIfRoom() REQUIRES(mu_) {
    if (read_started_ || read_done_ || finishing_) return;
    if (pending_.size() >= kPendingToPause || in_flight_ >= kInFlightToPause) return;
    read_started_ = true;
    incoming_ = std::make_shared<inference::ModelInferRequest>();
    stream_.Read(incoming_.get(), &read_);
  }

  void OnRead(bool ok) EXCLUDES(mu_) {
    std::shared_ptr<inference::ModelInferRequest> request;
    {
      MutexLock lock(mu_);
      read_started_ = false;
      if (!ok) {  // the client sent its last request (or went)
        read_done_ = true;
        return WriteOrFinish();
      }
      request = std::move(incoming_);
      ++in_flight_;
    }
    server_->Owe();
    // Not under mu_: the routes may answer at once, on this thread (Send).
    GrpcRoutes::CallContext call = stream_context_;
    call.received = std::chrono::steady_clock::now();
    server_->routes()->StreamInfer(std::move(request), std::move(call),
                                   [this](std::optional<Response> response, bool last) {
                                     Send(std::move(response), last);
                                   });
    MutexLock lock(mu_);
    ReadIfRoom();
  }

  // From the routes, on any thread: a response of one request, and whether it is its last.
  void Send(std::optional<Response> response, bool last) EXCLUDES(mu_) {
    // Once the lock is let go, a Finish started here may complete and free this stream on the
    // queue's thread (OnFinished waits out this locked section first): nothing of it is
    // touched after.
    GrpcServer::Impl* server = server_;
    {
      MutexLock lock(mu_);
      if (response.has_value() && !broken_) pending_.push_back(std::move(*response));
      if (last) --in_flight_;
      WriteOrFinish();
      ReadIfRoom();
    }
    if (last) server->Paid();  // after the write or finish it may start is queued
  }

  void OnWritten(bool ok) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    writing_ = false;
    if (!ok) {  // the client went: nothing more can be written
      broken_ = true;
      pending_.clear();
    }
    WriteOrFinish();
    ReadIfRoom();
  }

  // The stream is the registry's until both its Finish and gRPC's done notice have come; the
  // notice says whether the client cancelled the stream, which every request of it then reads.
  void OnFinished(bool) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);  // also: a Send that started the Finish has left its locked section
      finished_ = true;
      if (!noticed_) return;
    }
    server_->RemoveStream(this);
  }
  void OnDone(bool) EXCLUDES(mu_) {
    if (context_.IsCancelled()) cancel_->Cancel();
    {
      MutexLock lock(mu_);
      noticed_ = true;
      if (!finished_) return;
    }
    server_->RemoveStream(this);
  }

  void WriteOrFinish() REQUIRES(mu_) {
    if (writing_ || finishing_) return;
    if (!pending_.empty()) {
      writing_ = true;
      written_ = std::move(pending_.front());
      pending_.pop_front();
      stream_.Write(written_, &write_);
      return;
    }
    if (read_done_ && in_flight_ == 0) {
      finishing_ = true;
      stream_.Finish(grpc::Status::OK, &finish_);
    }
  }

  GrpcServer::Impl* const server_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<Response, inference::ModelInferRequest> stream_{&context_};
  Op accepted_{this, &StreamCall::OnAccepted};
  Op read_{this, &StreamCall::OnRead};
  Op write_{this, &StreamCall::OnWritten};
  Op finish_{this, &StreamCall::OnFinished};
  Op done_{this, &StreamCall::OnDone};
  const std::shared_ptr<CancelFlag> cancel_ = std::make_shared<CancelFlag>();
  GrpcRoutes::CallContext stream_context_;  // set once accepted, before the first read
  Mutex mu_;
  std::shared_ptr<inference::ModelInferRequest> incoming_ GUARDED_BY(mu_);  // the read fills it
  std::deque<Response> pending_ GUARDED_BY(mu_);
  Response written_ GUARDED_BY(mu_);  // the write in progress sends it
  int64_t in_flight_ GUARDED_BY(mu_) = 0;  // requests not at their last response
  bool read_started_ GUARDED_BY(mu_) = false;  // a read is in progress
  bool read_done_ GUARDED_BY(mu_) = false;
  bool writing_ GUARDED_BY(mu_) = false;
  bool finishing_ GUARDED_BY(mu_) = false;
  bool broken_ GUARDED_BY(mu_) = false;
  bool finished_ GUARDED_BY(mu_) = false;  // the Finish has completed
  bool noticed_ GUARDED_BY(mu_) = false;   // gRPC's done notice has come
};

// One grpc.health.v1.Health/Watch: the service's status when the call starts, then NOT_SERVING
// when the server shuts down, which ends the stream (status changes in between are not pushed:
// Check answers them). The watch is the registry's until its last operation and gRPC's notice
// that the call is over have both come.
class WatchCall final : public Stream {
 public:
  using Response = grpc::health::v1::HealthCheckResponse;

  WatchCall(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq) : server_(server), cq_(cq) {}

  static void Listen(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq) {
    server->ListenStream(std::make_unique<WatchCall>(server, cq), [&](WatchCall* call) {
      call->context_.AsyncNotifyWhenDone(&call->done_);  // before the call starts, as gRPC asks
      server->health()->RequestWatch(&call->context_, &call->request_, &call->writer_, cq, cq,
                                     &call->accepted_);
    });
  }

  void Stop() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    stop_ = true;
    Advance();
  }

 private:
  using Op = MemberOp<WatchCall>;

  void OnAccepted(bool ok) EXCLUDES(mu_) {
    if (!ok) return server_->RemoveStream(this);  // never started: no notice will come
    Listen(server_, cq_);
    MutexLock lock(mu_);
    started_ = true;
    if (auto refused = server_->Refusal(context_, server::ApiCategory::kHealth)) {
      finishing_ = true;
      writer_.Finish(*refused, &finish_);
      return;
    }
    if (server_->stopping()) stop_ = true;
    response_.set_status(server_->routes()->HealthOf(request_.service()));
    if (!stop_) {
      writing_ = true;
      writer_.Write(response_, &write_);
    }
    Advance();
  }
  void OnWritten(bool ok) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    writing_ = false;
    if (!ok) gone_ = true;
    Advance();
  }
  void OnDone(bool) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      gone_ = true;
      noticed_ = true;
      Advance();
      if (!finished_) return;
    }
    server_->RemoveStream(this);
  }
  void OnFinished(bool) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      finished_ = true;
      if (!noticed_) return;
    }
    server_->RemoveStream(this);
  }

  // Ends the stream once no write is in flight and there is a reason to: the client went, or
  // the server stops (the last word then being NOT_SERVING).
  void Advance() REQUIRES(mu_) {
    if (!started_ || writing_ || finishing_ || !(stop_ || gone_)) return;
    finishing_ = true;
    if (gone_) {
      writer_.Finish(grpc::Status::OK, &finish_);
    } else {
      response_.set_status(Response::NOT_SERVING);
      writer_.WriteAndFinish(response_, grpc::WriteOptions(), grpc::Status::OK, &finish_);
    }
  }

  GrpcServer::Impl* const server_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext context_;
  grpc::health::v1::HealthCheckRequest request_;
  grpc::ServerAsyncWriter<Response> writer_{&context_};
  Op accepted_{this, &WatchCall::OnAccepted};
  Op write_{this, &WatchCall::OnWritten};
  Op done_{this, &WatchCall::OnDone};
  Op finish_{this, &WatchCall::OnFinished};
  Mutex mu_;
  Response response_ GUARDED_BY(mu_);
  bool started_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  bool gone_ GUARDED_BY(mu_) = false;  // the client cancelled, or a write failed
  bool writing_ GUARDED_BY(mu_) = false;
  bool finishing_ GUARDED_BY(mu_) = false;
  bool finished_ GUARDED_BY(mu_) = false;
  bool noticed_ GUARDED_BY(mu_) = false;  // AsyncNotifyWhenDone's tag came
};

template <typename Request, typename Response, typename AsyncService = Service>
void Serve(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq,
           typename UnaryCall<AsyncService, Request, Response>::Enqueue enqueue,
           typename UnaryCall<AsyncService, Request, Response>::Handler handler,
           server::ApiCategory category) {
  UnaryCall<AsyncService, Request, Response>::Listen(server, cq, enqueue, handler, category);
}

}  // namespace

void GrpcServer::Impl::ListenAll(grpc::ServerCompletionQueue* cq) {
  using namespace inference;  // NOLINT: the message names, as the service spells them
  using server::ApiCategory;  // each RPC's category of Triton's restricted protocols
  Serve<ServerLiveRequest, ServerLiveResponse>(this, cq, &Service::RequestServerLive,
                                               &GrpcRoutes::ServerLive, ApiCategory::kHealth);
  Serve<ServerReadyRequest, ServerReadyResponse>(this, cq, &Service::RequestServerReady,
                                                 &GrpcRoutes::ServerReady, ApiCategory::kHealth);
  Serve<ModelReadyRequest, ModelReadyResponse>(this, cq, &Service::RequestModelReady,
                                               &GrpcRoutes::ModelReady, ApiCategory::kHealth);
  Serve<ServerMetadataRequest, ServerMetadataResponse>(this, cq, &Service::RequestServerMetadata,
                                                       &GrpcRoutes::ServerMetadata,
                                                       ApiCategory::kMetadata);
  Serve<ModelMetadataRequest, ModelMetadataResponse>(this, cq, &Service::RequestModelMetadata,
                                                     &GrpcRoutes::ModelMetadata,
                                                     ApiCategory::kMetadata);
  Serve<ModelConfigRequest, ModelConfigResponse>(this, cq, &Service::RequestModelConfig,
                                                 &GrpcRoutes::ModelConfig,
                                                 ApiCategory::kModelConfig);
  // Several calls wait for ModelInfer on each queue, so that a burst of requests is matched at
  // once rather than one per turn of the queue's thread.
  for (int i = 0; i < kInferListeners; ++i) InferCall::Listen(this, cq);
  StreamCall::Listen(this, cq);
  Serve<RepositoryIndexRequest, RepositoryIndexResponse>(this, cq, &Service::RequestRepositoryIndex,
                                                         &GrpcRoutes::RepositoryIndex,
                                                         ApiCategory::kModelRepository);
  Serve<RepositoryModelLoadRequest, RepositoryModelLoadResponse>(
      this, cq, &Service::RequestRepositoryModelLoad, &GrpcRoutes::RepositoryModelLoad,
      ApiCategory::kModelRepository);
  Serve<RepositoryModelUnloadRequest, RepositoryModelUnloadResponse>(
      this, cq, &Service::RequestRepositoryModelUnload, &GrpcRoutes::RepositoryModelUnload,
      ApiCategory::kModelRepository);
  Serve<ModelStatisticsRequest, ModelStatisticsResponse>(
      this, cq, &Service::RequestModelStatistics, &GrpcRoutes::ModelStatistics,
      ApiCategory::kStatistics);
  Serve<LogSettingsRequest, LogSettingsResponse>(this, cq, &Service::RequestLogSettings,
                                                 &GrpcRoutes::LogSettings, ApiCategory::kLogging);
  Serve<TraceSettingRequest, TraceSettingResponse>(this, cq, &Service::RequestTraceSetting,
                                                   &GrpcRoutes::TraceSetting, ApiCategory::kTrace);
  Serve<SystemSharedMemoryStatusRequest, SystemSharedMemoryStatusResponse>(
      this, cq, &Service::RequestSystemSharedMemoryStatus, &GrpcRoutes::SystemSharedMemoryStatus,
      ApiCategory::kSharedMemory);
  Serve<SystemSharedMemoryRegisterRequest, SystemSharedMemoryRegisterResponse>(
      this, cq, &Service::RequestSystemSharedMemoryRegister,
      &GrpcRoutes::SystemSharedMemoryRegister, ApiCategory::kSharedMemory);
  Serve<SystemSharedMemoryUnregisterRequest, SystemSharedMemoryUnregisterResponse>(
      this, cq, &Service::RequestSystemSharedMemoryUnregister,
      &GrpcRoutes::SystemSharedMemoryUnregister, ApiCategory::kSharedMemory);
  Serve<CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse>(
      this, cq, &Service::RequestCudaSharedMemoryStatus, &GrpcRoutes::CudaSharedMemoryStatus,
      ApiCategory::kSharedMemory);
  Serve<CudaSharedMemoryRegisterRequest, CudaSharedMemoryRegisterResponse>(
      this, cq, &Service::RequestCudaSharedMemoryRegister, &GrpcRoutes::CudaSharedMemoryRegister,
      ApiCategory::kSharedMemory);
  Serve<CudaSharedMemoryUnregisterRequest, CudaSharedMemoryUnregisterResponse>(
      this, cq, &Service::RequestCudaSharedMemoryUnregister,
      &GrpcRoutes::CudaSharedMemoryUnregister, ApiCategory::kSharedMemory);
  Serve<grpc::health::v1::HealthCheckRequest, grpc::health::v1::HealthCheckResponse,
        HealthService>(this, cq, &HealthService::RequestCheck, &GrpcRoutes::HealthCheck,
                       ApiCategory::kHealth);
  WatchCall::Listen(this, cq);
}

Result<GrpcServer::Options::CompressionLevel> GrpcServer::ParseCompressionLevel(
    std::string_view text) {
  using Level = Options::CompressionLevel;
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "none") return Level::kNone;
  if (lower == "low") return Level::kLow;
  if (lower == "medium") return Level::kMedium;
  if (lower == "high") return Level::kHigh;
  return Status::InvalidArgument(fmt::format(
      "--grpc-infer-response-compression-level: '{}' is none of none, low, medium, high", text));
}

Result<std::vector<std::pair<std::string, int>>> GrpcServer::ParseChannelArgs(
    std::string_view text) {
  std::vector<std::pair<std::string, int>> args;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view entry = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (entry.empty()) continue;
    const size_t equals = entry.find('=');
    int value = 0;
    const char* end = entry.data() + entry.size();
    const auto parsed = equals == std::string_view::npos
                            ? std::from_chars_result{end, std::errc::invalid_argument}
                            : std::from_chars(entry.data() + equals + 1, end, value);
    if (equals == 0 || equals == std::string_view::npos || parsed.ec != std::errc() ||
        parsed.ptr != end || equals + 1 == entry.size()) {
      return Status::InvalidArgument(fmt::format(
          "gRPC channel argument '{}' is not name=integer", entry));
    }
    args.emplace_back(std::string(entry.substr(0, equals)), value);
  }
  return args;
}

Result<std::unique_ptr<GrpcServer>> GrpcServer::Start(const Options& options,
                                                      const GrpcRoutes* routes) {
  auto impl = std::make_unique<Impl>(options, routes);
  VRAMD_RETURN_IF_ERROR(impl->Start());
  return std::make_unique<GrpcServer>(std::move(impl));
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrpcServer::~GrpcServer() { Shutdown(); }
int GrpcServer::port() const { return impl_->port(); }
void GrpcServer::Shutdown() { impl_->Shutdown(); }

}  // namespace vramd::grpc_server
