// What each RPC of inference.GRPCInferenceService does (grpc_service.proto), on top of the
// ModelManager and the runtime's one request path (runtime/infer_router.h), with the HTTP
// front end's checks and texts (server/http/kserve_routes.h) and Triton's mapping of errors to
// gRPC codes (ToGrpcStatus). The server machinery (completion queues, threads) is
// grpc_server.h's; this class sees messages only.
//
// Every handler answers through its Reply exactly once, possibly later and from another thread
// (ModelInfer answers from an instance thread; load and unload from a control thread).
//
// Thread safety: every handler may be called concurrently.
#pragma once

#include <grpcpp/support/status.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "runtime/model_manager.h"
#include "server/grpc/grpc_service.pb.h"
#include "server/grpc/health.pb.h"
#include "server/grpc/infer_proto_codec.h"
#include "server/logging/log_settings.h"
#include "server/http/control_dispatcher.h"
#include "server/drain/drain.h"
#include "server/shared_memory/shared_memory_regions.h"
#include "server/trace/tracer.h"

namespace vramd::grpc_server {

// Triton's mapping: InvalidArgument and AlreadyExists INVALID_ARGUMENT, NotFound NOT_FOUND,
// Unavailable UNAVAILABLE, Unsupported UNIMPLEMENTED, ResourceExhausted RESOURCE_EXHAUSTED,
// Cancelled CANCELLED, Internal INTERNAL, Unknown UNKNOWN. The message is the Status's.
grpc::Status ToGrpcStatus(const Status& status);

template <typename Response>
using Reply = std::function<void(grpc::Status, Response)>;

class GrpcRoutes {
 public:
  struct ServerInfo {
    std::string name = "vramd";
    std::string version;
    bool strict_readiness = true;  // as KServeRoutes::ServerInfo
    // The logging extension's settings, shared with HTTP; outlives the routes. Null: the
    // LogSettings RPC is UNIMPLEMENTED.
    logging::LogSettings* log_settings = nullptr;
    // The drain shared with HTTP (server/drain/drain.h): counts ModelInfer and stream
    // requests, and makes ServerReady and the service's health NOT_SERVING while draining.
    server::Drain* drain = nullptr;
    // Tracing of ModelInfer calls and the TraceSetting RPC (shared with HTTP, outliving every
    // request); null: TraceSetting is UNIMPLEMENTED and nothing is traced.
    trace::Tracer* tracer = nullptr;
  };

  // `manager` must outlive this object and every request it starts. A const manager serves
  // everything but load and unload, which then answer as the HTTP routes do. `shared_memory`
  // (outliving this object too) holds the system and CUDA shared-memory regions; null turns
  // both extensions off (their RPCs and tensor parameters are then UNIMPLEMENTED).
  GrpcRoutes(runtime::ModelManager* manager, ServerInfo info,
             shared_memory::SharedMemoryRegions* shared_memory = nullptr);
  GrpcRoutes(const runtime::ModelManager* manager, ServerInfo info,
             shared_memory::SharedMemoryRegions* shared_memory = nullptr);

  void ServerLive(std::shared_ptr<const inference::ServerLiveRequest> request,
                  Reply<inference::ServerLiveResponse> reply) const;
  void ServerReady(std::shared_ptr<const inference::ServerReadyRequest> request,
                   Reply<inference::ServerReadyResponse> reply) const;
  // grpc.health.v1.Health: "" (the server) is SERVING while it runs, as Triton's;
  // "inference.GRPCInferenceService" is SERVING when ServerReady would say ready, else
  // NOT_SERVING; any other name is unknown (Check: NOT_FOUND naming it; Watch:
  // SERVICE_UNKNOWN).
  grpc::health::v1::HealthCheckResponse::ServingStatus HealthOf(const std::string& service) const;
  bool Draining() const { return info_.drain != nullptr && info_.drain->draining(); }
  void HealthCheck(std::shared_ptr<const grpc::health::v1::HealthCheckRequest> request,
                   Reply<grpc::health::v1::HealthCheckResponse> reply) const;
  void ModelReady(std::shared_ptr<const inference::ModelReadyRequest> request,
                  Reply<inference::ModelReadyResponse> reply) const;
  void ServerMetadata(std::shared_ptr<const inference::ServerMetadataRequest> request,
                      Reply<inference::ServerMetadataResponse> reply) const;
  void ModelMetadata(std::shared_ptr<const inference::ModelMetadataRequest> request,
                     Reply<inference::ModelMetadataResponse> reply) const;
  void ModelConfig(std::shared_ptr<const inference::ModelConfigRequest> request,
                   Reply<inference::ModelConfigResponse> reply) const;
  // What an inference call brings besides its message.
  struct CallContext {
    std::string traceparent;  // the call's W3C trace context metadata, or empty
    // When the message was read (a trace's GRPC_WAITREAD_END).
    std::chrono::steady_clock::time_point received;
    // Set when the client cancels the call, which the model then reads (InferRequest::cancel);
    // null: none.
    std::shared_ptr<CancelFlag> cancel;
    // The call's metadata that --grpc-header-forward-pattern forwards, as string parameters;
    // they follow the message's own in InferRequest::parameters.
    std::vector<vramd::InferParameter> forwarded;
  };
  // The answer's raw outputs are the outcome's own buffers (EncodedInferResponse).
  void ModelInfer(std::shared_ptr<const inference::ModelInferRequest> request, CallContext call,
                  Reply<EncodedInferResponse> reply) const;
  void ModelStatistics(std::shared_ptr<const inference::ModelStatisticsRequest> request,
                       Reply<inference::ModelStatisticsResponse> reply) const;
  // Triton's logging extension (server/logging/log_settings.h): a change of a setting fixed
  // at start-up is UNIMPLEMENTED, naming its flag.
  void LogSettings(std::shared_ptr<const inference::LogSettingsRequest> request,
                   Reply<inference::LogSettingsResponse> reply) const;
  void TraceSetting(std::shared_ptr<const inference::TraceSettingRequest> request,
                    Reply<inference::TraceSettingResponse> reply) const;
  // One request of a ModelStreamInfer stream. `send` gets each response (or error, as
  // error_message) in order, with `last` true on the request's last call, once; a call with no
  // response only ends the request. A decoupled model's responses carry the parameter
  // triton_final_response (false); its end is an empty response with triton_final_response
  // true when the request asked with triton_enable_empty_final_response, else nothing. Any
  // other model answers once, that answer being the last. `call`: the stream's trace context
  // (every request of the stream joins that trace), cancel flag (shared by all of its
  // requests) and forwarded metadata, with when this request's message was read. A traced
  // request's trace ends as its last call of `send` returns.
  using StreamSend =
      std::function<void(std::optional<inference::ModelStreamInferResponse>, bool last)>;
  void StreamInfer(std::shared_ptr<const inference::ModelInferRequest> request, CallContext call,
                   StreamSend send) const;
  void SystemSharedMemoryRegister(
      std::shared_ptr<const inference::SystemSharedMemoryRegisterRequest> request,
      Reply<inference::SystemSharedMemoryRegisterResponse> reply) const;
  void SystemSharedMemoryStatus(
      std::shared_ptr<const inference::SystemSharedMemoryStatusRequest> request,
      Reply<inference::SystemSharedMemoryStatusResponse> reply) const;
  void SystemSharedMemoryUnregister(
      std::shared_ptr<const inference::SystemSharedMemoryUnregisterRequest> request,
      Reply<inference::SystemSharedMemoryUnregisterResponse> reply) const;
  void CudaSharedMemoryRegister(
      std::shared_ptr<const inference::CudaSharedMemoryRegisterRequest> request,
      Reply<inference::CudaSharedMemoryRegisterResponse> reply) const;
  void CudaSharedMemoryStatus(
      std::shared_ptr<const inference::CudaSharedMemoryStatusRequest> request,
      Reply<inference::CudaSharedMemoryStatusResponse> reply) const;
  void CudaSharedMemoryUnregister(
      std::shared_ptr<const inference::CudaSharedMemoryUnregisterRequest> request,
      Reply<inference::CudaSharedMemoryUnregisterResponse> reply) const;
  void RepositoryIndex(std::shared_ptr<const inference::RepositoryIndexRequest> request,
                       Reply<inference::RepositoryIndexResponse> reply) const;
  void RepositoryModelLoad(std::shared_ptr<const inference::RepositoryModelLoadRequest> request,
                           Reply<inference::RepositoryModelLoadResponse> reply) const;
  void RepositoryModelUnload(std::shared_ptr<const inference::RepositoryModelUnloadRequest> request,
                             Reply<inference::RepositoryModelUnloadResponse> reply) const;

 private:
  // The request's trace when the tracer samples it, else null.
  std::shared_ptr<RequestTrace> StartTrace(const std::string& model, std::string_view traceparent,
                                           std::chrono::steady_clock::time_point received) const;

  const runtime::ModelManager* manager_;
  runtime::ModelManager* mutable_manager_ = nullptr;  // null: load and unload are refused
  const ServerInfo info_;
  shared_memory::SharedMemoryRegions* const shared_memory_;
  // Load and unload, which take seconds, run here, not on a completion-queue thread. Last:
  // joined (answering what was posted) before the rest goes.
  std::unique_ptr<http::ControlDispatcher> control_;
};

}  // namespace vramd::grpc_server
