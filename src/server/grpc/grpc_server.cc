#include "server/grpc/grpc_server.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "server/grpc/grpc_service.grpc.pb.h"

namespace vramd::grpc_server {
namespace {

using Service = inference::GRPCInferenceService::AsyncService;

constexpr int kInferListeners = 16;

// A completion-queue tag: one call's state machine. Proceed runs on a queue thread for each
// event of the call and says whether the call still waits on gRPC (kept) or is done (freed).
class Call {
 public:
  virtual ~Call() = default;
  virtual bool Proceed(bool ok) = 0;
};

}  // namespace

class GrpcServer::Impl {
 public:
  Impl(const Options& options, const GrpcRoutes* routes) : options_(options), routes_(routes) {}

  Status Start() {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int selected_port = 0;
    const std::string address = fmt::format("{}:{}", options_.address, options_.port);
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &selected_port);
    builder.RegisterService(&service_);
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
      return Status::Unavailable(fmt::format("gRPC: cannot listen on {}", address));
    }
    port_ = selected_port;
    {
      MutexLock lock(mu_);
      accepting_ = true;
    }
    for (auto& cq : cqs_) ListenAll(cq.get());
    for (auto& cq : cqs_) {
      threads_.emplace_back([cq = cq.get()] { Drain(cq); });
    }
    return Status::Ok();
  }

  int port() const { return port_; }

  void Shutdown() EXCLUDES(mu_) {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() + options_.drain_timeout);
    {
      // No call is matched from here on; what the runtime still owes comes (exactly once).
      MutexLock lock(mu_);
      // Every stream ends too: the server's shutdown cancelled those still open, so their
      // operations complete and each finishes.
      lock.Wait(owed_cv_, [this]() REQUIRES(mu_) { return owed_ == 0 && streams_.empty(); });
      accepting_ = false;
    }
    for (auto& cq : cqs_) cq->Shutdown();
    for (auto& t : threads_) t.join();
    threads_.clear();
    server_.reset();
  }

  Service* service() { return &service_; }
  const GrpcRoutes* routes() const { return routes_; }

  // Runs `enqueue` (a RequestX of the service) unless the queues are closing: a call that got
  // its request asks for the next one, which must not reach a queue being shut down.
  template <typename Enqueue>
  void IfAccepting(Enqueue enqueue) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (accepting_) enqueue();
  }

  // Streams live here from their first wait for a call until their Finish completes
  // (StreamCall); `enqueue` asks for the call, as IfAccepting's does.
  template <typename Stream, typename Enqueue>
  void ListenStream(std::unique_ptr<Stream> stream, Enqueue enqueue) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (!accepting_) return;
    Stream* raw = stream.get();
    streams_.emplace(raw, std::shared_ptr<void>(std::move(stream)));
    enqueue(raw);
  }
  void RemoveStream(const void* stream) EXCLUDES(mu_) {
    std::shared_ptr<void> gone;  // destroyed after the lock is let go
    MutexLock lock(mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;
    gone = std::move(it->second);
    streams_.erase(it);
    if (streams_.empty()) owed_cv_.notify_all();
  }

  void Owe() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    ++owed_;
  }
  void Paid() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (--owed_ == 0) owed_cv_.notify_all();
  }

 private:
  void ListenAll(grpc::ServerCompletionQueue* cq);

  static void Drain(grpc::ServerCompletionQueue* cq) {
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
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  Mutex mu_;
  std::condition_variable owed_cv_;
  int64_t owed_ GUARDED_BY(mu_) = 0;  // calls handed to a handler, not yet answered
  bool accepting_ GUARDED_BY(mu_) = false;
  std::map<const void*, std::shared_ptr<void>> streams_ GUARDED_BY(mu_);
  std::vector<std::thread> threads_;  // joined by Shutdown
};

namespace {

// One unary RPC: waits for a request, asks for the next, runs the handler, sends its answer.
template <typename Request, typename Response>
class UnaryCall final : public Call {
 public:
  using Enqueue = void (Service::*)(grpc::ServerContext*, Request*,
                                    grpc::ServerAsyncResponseWriter<Response>*,
                                    grpc::CompletionQueue*, grpc::ServerCompletionQueue*, void*);
  using Handler = void (GrpcRoutes::*)(std::shared_ptr<const Request>, Reply<Response>) const;

  UnaryCall(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq, Enqueue enqueue,
            Handler handler)
      : server_(server), cq_(cq), enqueue_(enqueue), handler_(handler) {}

  static void Listen(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq, Enqueue enqueue,
                     Handler handler) {
    server->IfAccepting([&] {
      auto call = std::make_unique<UnaryCall>(server, cq, enqueue, handler);
      UnaryCall* tag = call.release();  // the queue's until it hands the tag back
      (server->service()->*enqueue)(&tag->context_, tag->request_.get(), &tag->writer_, cq, cq, tag);
    });
  }

  bool Proceed(bool ok) override {
    if (answered_ || !ok) return false;  // sent, or the server is shutting down
    Listen(server_, cq_, enqueue_, handler_);
    server_->Owe();
    (server_->routes()->*handler_)(request_, [this](grpc::Status status, Response response) {
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
    });
    return true;
  }

 private:
  GrpcServer::Impl* const server_;
  grpc::ServerCompletionQueue* const cq_;
  const Enqueue enqueue_;
  const Handler handler_;
  grpc::ServerContext context_;
  std::shared_ptr<Request> request_ = std::make_shared<Request>();
  Response response_;
  grpc::ServerAsyncResponseWriter<Response> writer_{&context_};
  bool answered_ = false;  // read on the queue's thread after the Finish it precedes
};

// An RPC vramd does not serve: UNIMPLEMENTED, with a message that names it.
template <typename Request, typename Response>
class UnimplementedCall final : public Call {
 public:
  using Enqueue = typename UnaryCall<Request, Response>::Enqueue;

  UnimplementedCall(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq, Enqueue enqueue,
                    const char* message)
      : server_(server), cq_(cq), enqueue_(enqueue), message_(message) {}

  static void Listen(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq, Enqueue enqueue,
                     const char* message) {
    server->IfAccepting([&] {
      auto call = std::make_unique<UnimplementedCall>(server, cq, enqueue, message);
      UnimplementedCall* tag = call.release();
      (server->service()->*enqueue)(&tag->context_, &tag->request_, &tag->writer_, cq, cq, tag);
    });
  }

  bool Proceed(bool ok) override {
    if (answered_ || !ok) return false;
    Listen(server_, cq_, enqueue_, message_);
    answered_ = true;
    writer_.FinishWithError(
        grpc::Status(grpc::StatusCode::UNIMPLEMENTED, message_),
        this);
    return true;
  }

 private:
  GrpcServer::Impl* const server_;
  grpc::ServerCompletionQueue* const cq_;
  const Enqueue enqueue_;
  const char* const message_;
  grpc::ServerContext context_;
  Request request_;
  grpc::ServerAsyncResponseWriter<Response> writer_{&context_};
  bool answered_ = false;
};

// One ModelStreamInfer stream: requests are read one after another and each is handed to the
// routes as it comes (several may run at once); their responses are written in the order they
// are produced, one write at a time; once the client has sent its last request and every
// request has had its last response, the stream ends with OK. A stream is kept in the server's
// registry until its Finish completes, and each of its operations has a tag of its own.
class StreamCall {
 public:
  using Response = inference::ModelStreamInferResponse;

  StreamCall(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq) : server_(server), cq_(cq) {}

  static void Listen(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq) {
    server->ListenStream(std::make_unique<StreamCall>(server, cq), [&](StreamCall* call) {
      server->service()->RequestModelStreamInfer(&call->context_, &call->stream_, cq, cq,
                                                 &call->accepted_);
    });
  }

 private:
  // A tag for one kind of operation of this stream; never freed by the queue (it is a member).
  class Op final : public Call {
   public:
    Op(StreamCall* call, void (StreamCall::*on)(bool)) : call_(call), on_(on) {}
    bool Proceed(bool ok) override {
      (call_->*on_)(ok);
      return true;
    }

   private:
    StreamCall* const call_;
    void (StreamCall::*const on_)(bool);
  };

  void OnAccepted(bool ok) {
    if (!ok) return server_->RemoveStream(this);  // the server is shutting down
    Listen(server_, cq_);
    Read();
  }

  void Read() {
    reading_ = std::make_shared<inference::ModelInferRequest>();
    stream_.Read(reading_.get(), &read_);
  }

  void OnRead(bool ok) EXCLUDES(mu_) {
    if (!ok) {  // the client sent its last request (or went)
      MutexLock lock(mu_);
      read_done_ = true;
      return WriteOrFinish();
    }
    {
      MutexLock lock(mu_);
      ++in_flight_;
    }
    server_->Owe();
    server_->routes()->StreamInfer(std::move(reading_),
                                   [this](std::optional<Response> response, bool last) {
                                     Send(std::move(response), last);
                                   });
    Read();
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
  }

  void OnFinished(bool) EXCLUDES(mu_) {
    { MutexLock lock(mu_); }  // a Send that started the Finish has left its locked section
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
  std::shared_ptr<inference::ModelInferRequest> reading_;  // the read in progress fills it
  Mutex mu_;
  std::deque<Response> pending_ GUARDED_BY(mu_);
  Response written_ GUARDED_BY(mu_);  // the write in progress sends it
  int64_t in_flight_ GUARDED_BY(mu_) = 0;  // requests not at their last response
  bool read_done_ GUARDED_BY(mu_) = false;
  bool writing_ GUARDED_BY(mu_) = false;
  bool finishing_ GUARDED_BY(mu_) = false;
  bool broken_ GUARDED_BY(mu_) = false;
};

template <typename Request, typename Response>
void Serve(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq,
           typename UnaryCall<Request, Response>::Enqueue enqueue,
           typename UnaryCall<Request, Response>::Handler handler) {
  UnaryCall<Request, Response>::Listen(server, cq, enqueue, handler);
}

template <typename Request, typename Response>
void Refuse(GrpcServer::Impl* server, grpc::ServerCompletionQueue* cq,
            typename UnaryCall<Request, Response>::Enqueue enqueue, const char* message) {
  UnimplementedCall<Request, Response>::Listen(server, cq, enqueue, message);
}

}  // namespace

void GrpcServer::Impl::ListenAll(grpc::ServerCompletionQueue* cq) {
  using namespace inference;  // NOLINT: the message names, as the service spells them
  Serve<ServerLiveRequest, ServerLiveResponse>(this, cq, &Service::RequestServerLive,
                                               &GrpcRoutes::ServerLive);
  Serve<ServerReadyRequest, ServerReadyResponse>(this, cq, &Service::RequestServerReady,
                                                 &GrpcRoutes::ServerReady);
  Serve<ModelReadyRequest, ModelReadyResponse>(this, cq, &Service::RequestModelReady,
                                               &GrpcRoutes::ModelReady);
  Serve<ServerMetadataRequest, ServerMetadataResponse>(this, cq, &Service::RequestServerMetadata,
                                                       &GrpcRoutes::ServerMetadata);
  Serve<ModelMetadataRequest, ModelMetadataResponse>(this, cq, &Service::RequestModelMetadata,
                                                     &GrpcRoutes::ModelMetadata);
  Serve<ModelConfigRequest, ModelConfigResponse>(this, cq, &Service::RequestModelConfig,
                                                 &GrpcRoutes::ModelConfig);
  // Several calls wait for ModelInfer on each queue, so that a burst of requests is matched at
  // once rather than one per turn of the queue's thread.
  for (int i = 0; i < kInferListeners; ++i) {
    Serve<ModelInferRequest, ModelInferResponse>(this, cq, &Service::RequestModelInfer,
                                                 &GrpcRoutes::ModelInfer);
  }
  Serve<RepositoryIndexRequest, RepositoryIndexResponse>(this, cq, &Service::RequestRepositoryIndex,
                                                         &GrpcRoutes::RepositoryIndex);
  Serve<RepositoryModelLoadRequest, RepositoryModelLoadResponse>(
      this, cq, &Service::RequestRepositoryModelLoad, &GrpcRoutes::RepositoryModelLoad);
  Serve<RepositoryModelUnloadRequest, RepositoryModelUnloadResponse>(
      this, cq, &Service::RequestRepositoryModelUnload, &GrpcRoutes::RepositoryModelUnload);
  StreamCall::Listen(this, cq);
  Serve<ModelStatisticsRequest, ModelStatisticsResponse>(
      this, cq, &Service::RequestModelStatistics, &GrpcRoutes::ModelStatistics);
  Serve<LogSettingsRequest, LogSettingsResponse>(this, cq, &Service::RequestLogSettings,
                                                 &GrpcRoutes::LogSettings);
  Serve<SystemSharedMemoryStatusRequest, SystemSharedMemoryStatusResponse>(
      this, cq, &Service::RequestSystemSharedMemoryStatus, &GrpcRoutes::SystemSharedMemoryStatus);
  Serve<SystemSharedMemoryRegisterRequest, SystemSharedMemoryRegisterResponse>(
      this, cq, &Service::RequestSystemSharedMemoryRegister,
      &GrpcRoutes::SystemSharedMemoryRegister);
  Serve<SystemSharedMemoryUnregisterRequest, SystemSharedMemoryUnregisterResponse>(
      this, cq, &Service::RequestSystemSharedMemoryUnregister,
      &GrpcRoutes::SystemSharedMemoryUnregister);
  Serve<CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse>(
      this, cq, &Service::RequestCudaSharedMemoryStatus, &GrpcRoutes::CudaSharedMemoryStatus);
  Serve<CudaSharedMemoryRegisterRequest, CudaSharedMemoryRegisterResponse>(
      this, cq, &Service::RequestCudaSharedMemoryRegister, &GrpcRoutes::CudaSharedMemoryRegister);
  Serve<CudaSharedMemoryUnregisterRequest, CudaSharedMemoryUnregisterResponse>(
      this, cq, &Service::RequestCudaSharedMemoryUnregister,
      &GrpcRoutes::CudaSharedMemoryUnregister);
  Refuse<TraceSettingRequest, TraceSettingResponse>(this, cq, &Service::RequestTraceSetting,
                                                    "TraceSetting: vramd does not trace requests");
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
