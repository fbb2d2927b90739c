#include "server/grpc/grpc_routes.h"

#include <fmt/format.h>

#include <limits>
#include <utility>

#include "config/model_config_json.h"
#include <spdlog/spdlog.h>

#include "runtime/infer_router.h"
#include "runtime/version_statistics.h"
#include "server/grpc/infer_proto_codec.h"

namespace vramd::grpc_server {
namespace {

using inference::ModelRepositoryParameter;

grpc::Status Ok() { return grpc::Status::OK; }

template <typename Response>
void Fail(const Reply<Response>& reply, const Status& status) {
  reply(ToGrpcStatus(status), Response());
}

bool IsDecoupled(const config::ModelConfig& config) {
  return config.has_model_transaction_policy() && config.model_transaction_policy().decoupled();
}

void AddTensors(const config::ModelConfig& config, const auto& tensors, auto* out) {
  for (const auto& t : tensors) {
    auto* m = out->Add();
    m->set_name(t.name());
    m->set_datatype(std::string(DataTypeWireName(static_cast<DataType>(t.data_type()))));
    if (config.max_batch_size() > 0) m->add_shape(-1);
    for (int64_t d : t.dims()) m->add_shape(d);
  }
}

}  // namespace

grpc::Status ToGrpcStatus(const Status& status) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (status.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
    case StatusCode::kAlreadyExists: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case StatusCode::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    case StatusCode::kUnsupported: code = grpc::StatusCode::UNIMPLEMENTED; break;
    case StatusCode::kInternal: code = grpc::StatusCode::INTERNAL; break;
    case StatusCode::kResourceExhausted: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case StatusCode::kCancelled: code = grpc::StatusCode::CANCELLED; break;
    case StatusCode::kUnknown: code = grpc::StatusCode::UNKNOWN; break;
  }
  return grpc::Status(code, status.message());
}

GrpcRoutes::GrpcRoutes(runtime::ModelManager* manager, ServerInfo info,
                       shared_memory::SharedMemoryRegions* shared_memory)
    : manager_(manager), mutable_manager_(manager), info_(std::move(info)), shared_memory_(shared_memory) {
  control_ = std::make_unique<http::ControlDispatcher>(2);
}

GrpcRoutes::GrpcRoutes(const runtime::ModelManager* manager, ServerInfo info,
                       shared_memory::SharedMemoryRegions* shared_memory)
    : manager_(manager), info_(std::move(info)), shared_memory_(shared_memory) {}

void GrpcRoutes::ServerLive(std::shared_ptr<const inference::ServerLiveRequest>,
                            Reply<inference::ServerLiveResponse> reply) const {
  inference::ServerLiveResponse r;
  r.set_live(true);
  reply(Ok(), std::move(r));
}

void GrpcRoutes::ServerReady(std::shared_ptr<const inference::ServerReadyRequest>,
                             Reply<inference::ServerReadyResponse> reply) const {
  inference::ServerReadyResponse r;
  r.set_ready(!Draining() && (!info_.strict_readiness || manager_->AllModelsReady()));
  reply(Ok(), std::move(r));
}

grpc::health::v1::HealthCheckResponse::ServingStatus GrpcRoutes::HealthOf(
    const std::string& service) const {
  using Health = grpc::health::v1::HealthCheckResponse;
  if (service.empty()) return Health::SERVING;
  if (service == "inference.GRPCInferenceService") {
    return !Draining() && (!info_.strict_readiness || manager_->AllModelsReady())
               ? Health::SERVING
               : Health::NOT_SERVING;
  }
  return Health::SERVICE_UNKNOWN;
}

void GrpcRoutes::HealthCheck(std::shared_ptr<const grpc::health::v1::HealthCheckRequest> request,
                             Reply<grpc::health::v1::HealthCheckResponse> reply) const {
  grpc::health::v1::HealthCheckResponse r;
  r.set_status(HealthOf(request->service()));
  if (r.status() == grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN) {
    return reply(grpc::Status(grpc::StatusCode::NOT_FOUND,
                              fmt::format("health: unknown service '{}'", request->service())),
                 {});
  }
  reply(grpc::Status::OK, std::move(r));
}

void GrpcRoutes::ModelReady(std::shared_ptr<const inference::ModelReadyRequest> request,
                            Reply<inference::ModelReadyResponse> reply) const {
  auto version = ParseModelVersion(request->version());
  if (!version.ok()) return Fail(reply, version.status());
  auto found = manager_->Find(request->name(), *version);
  inference::ModelReadyResponse r;
  if (!found.ok()) {
    // An unknown model or version is an error, as over HTTP; a known one not serving reads
    // not ready.
    if (found.status().code() == StatusCode::kNotFound) return Fail(reply, found.status());
    return reply(Ok(), std::move(r));
  }
  if (!(*found)->ChecksReadiness()) {
    r.set_ready((*found)->Available().ok());
    return reply(Ok(), std::move(r));
  }
  // The backend is asked on the version's probe thread (up to 5 s), not on this one.
  (*found)->CheckReadyAsync([reply = std::move(reply)](Status ready) {
    inference::ModelReadyResponse answer;
    answer.set_ready(ready.ok());
    reply(Ok(), std::move(answer));
  });
}

void GrpcRoutes::ServerMetadata(std::shared_ptr<const inference::ServerMetadataRequest>,
                                Reply<inference::ServerMetadataResponse> reply) const {
  inference::ServerMetadataResponse r;
  r.set_name(info_.name);
  r.set_version(info_.version);
  for (const char* e : {"classification", "model_configuration", "model_repository",
                        "parameters", "statistics"}) {
    r.add_extensions(e);
  }
  if (info_.tracer != nullptr) r.add_extensions("trace");
  if (shared_memory_ != nullptr) {
    r.add_extensions("system_shared_memory");
    r.add_extensions("cuda_shared_memory");
  }
  reply(Ok(), std::move(r));
}

void GrpcRoutes::ModelMetadata(std::shared_ptr<const inference::ModelMetadataRequest> request,
                               Reply<inference::ModelMetadataResponse> reply) const {
  auto version = ParseModelVersion(request->version());
  if (!version.ok()) return Fail(reply, version.status());
  auto found = manager_->Find(request->name(), *version);
  if (!found.ok()) return Fail(reply, found.status());
  const config::ModelConfig& config = (*found)->config();
  inference::ModelMetadataResponse r;
  r.set_name(config.name());
  if (*version != 0) {
    r.add_versions(std::to_string(*version));
  } else if (auto versions = manager_->ReadyVersions(request->name()); versions.ok()) {
    for (int64_t v : *versions) r.add_versions(std::to_string(v));
  }
  r.set_platform(config.platform().empty() ? config.backend() : config.platform());
  AddTensors(config, config.input(), r.mutable_inputs());
  AddTensors(config, config.output(), r.mutable_outputs());
  reply(Ok(), std::move(r));
}

void GrpcRoutes::ModelConfig(std::shared_ptr<const inference::ModelConfigRequest> request,
                             Reply<inference::ModelConfigResponse> reply) const {
  auto version = ParseModelVersion(request->version());
  if (!version.ok()) return Fail(reply, version.status());
  inference::ModelConfigResponse r;
  if (*version != 0) {
    auto found = manager_->Find(request->name(), *version);
    if (!found.ok()) return Fail(reply, found.status());
    *r.mutable_config() = (*found)->placed_config();
  } else {
    auto config = manager_->FindConfig(request->name());
    if (!config.ok()) return Fail(reply, config.status());
    *r.mutable_config() = **config;
  }
  reply(Ok(), std::move(r));
}

std::shared_ptr<RequestTrace> GrpcRoutes::StartTrace(
    const std::string& model, std::string_view traceparent,
    std::chrono::steady_clock::time_point received) const {
  if (info_.tracer == nullptr) return nullptr;
  return info_.tracer->Start(model, TraceProtocol::kGrpc, traceparent, received);
}

void GrpcRoutes::ModelInfer(std::shared_ptr<const inference::ModelInferRequest> message,
                            CallContext call, Reply<EncodedInferResponse> reply) const {
  auto version = ParseModelVersion(message->model_version());
  if (!version.ok()) return Fail(reply, version.status());
  auto request = std::make_shared<InferRequest>();
  // As the HTTP route's: run by the model's scheduler, possibly on an instance thread, which
  // encodes and replies; the outcome's ledger owner closes after the reply is encoded.
  const shared_memory::SharedMemoryRegions* shm = shared_memory_;
  server::Drain* drain = info_.drain;
  if (drain != nullptr) drain->RequestStarted();
  trace::Tracer* tracer = info_.tracer;
  std::shared_ptr<RequestTrace> trace =
      StartTrace(message->model_name(), call.traceparent, call.received);
  request->trace = trace;  // for an answer before the build, which carries it over
  // A trace ends as the answer is handed to gRPC (GRPC_SEND_END).
  auto finish_trace = [tracer](const std::shared_ptr<RequestTrace>& t, const Status& status) {
    if (t == nullptr) return;
    if (!status.ok()) t->SetError(status.message());
    t->Stamp(TracePoint::kSendStart);
    tracer->Finish(t);
  };
  runtime::InferCallback done = [request, message, shm, drain, finish_trace,
                                 reply = std::move(reply)](Result<runtime::InferOutcome> outcome) {
    server::EndsRequest ends(drain);
    request->inputs = {};  // views into the message: the runtime is done with them
    if (!outcome.ok()) {
      finish_trace(request->trace, outcome.status());
      return Fail(reply, outcome.status());
    }
    // The outcome lives on with the answer, which may send its outputs from where they are.
    auto held = std::make_shared<runtime::InferOutcome>(std::move(*outcome));
    EncodedInferResponse r;
    Status encoded =
        EncodeInferResponse(held->response, *request, &r.message, message.get(), shm, &r.raw);
    finish_trace(request->trace, encoded);
    if (!encoded.ok()) return Fail(reply, encoded);
    r.keep = std::move(held);
    reply(Ok(), std::move(r));
  };
  const std::string model = message->model_name();
  runtime::InferRouter(manager_).InferAsync(
      model, *version, std::move(request),
      [message = std::move(message), shm, trace, cancel = std::move(call.cancel),
       forwarded = std::move(call.forwarded)](
          const config::ModelConfig& config) -> Result<InferRequest> {
        if (IsDecoupled(config)) {
          return Status::Unsupported(
              "ModelInfer RPC doesn't support models with decoupled transaction policy");
        }
        Result<InferRequest> built = DecodeInferRequest(message, shm);
        if (built.ok()) {
          built->trace = trace;
          built->cancel = cancel;
          built->parameters.insert(built->parameters.end(), forwarded.begin(), forwarded.end());
        }
        return built;
      },
      std::move(done));
}

namespace {

void SetDuration(const runtime::DurationStat& d, inference::StatisticDuration* out) {
  out->set_count(d.count);
  out->set_ns(d.ns);
}

}  // namespace

void GrpcRoutes::ModelStatistics(std::shared_ptr<const inference::ModelStatisticsRequest> request,
                                 Reply<inference::ModelStatisticsResponse> reply) const {
  auto version = ParseModelVersion(request->version());
  if (!version.ok()) return Fail(reply, version.status());
  auto stats = runtime::StatisticsOf(*manager_, request->name(), *version);
  if (!stats.ok()) return Fail(reply, stats.status());
  inference::ModelStatisticsResponse r;
  for (const runtime::VersionStatistics& v : *stats) {
    const runtime::InferenceStatsSnapshot& s = v.stats;
    auto* m = r.add_model_stats();
    m->set_name(v.model);
    m->set_version(std::to_string(v.version));
    m->set_last_inference(s.last_inference_ms);
    m->set_inference_count(s.inference_count);
    m->set_execution_count(s.execution_count);
    auto* i = m->mutable_inference_stats();
    SetDuration(s.success, i->mutable_success());
    SetDuration(s.fail, i->mutable_fail());
    SetDuration(s.queue, i->mutable_queue());
    SetDuration(s.compute_input, i->mutable_compute_input());
    SetDuration(s.compute_infer, i->mutable_compute_infer());
    SetDuration(s.compute_output, i->mutable_compute_output());
    i->mutable_cache_hit();  // no response cache: zero, as over HTTP
    i->mutable_cache_miss();
    for (const runtime::BatchStat& b : s.batch_stats) {
      auto* out = m->add_batch_stats();
      out->set_batch_size(b.batch_size);
      SetDuration(b.compute_input, out->mutable_compute_input());
      SetDuration(b.compute_infer, out->mutable_compute_infer());
      SetDuration(b.compute_output, out->mutable_compute_output());
    }
  }
  reply(Ok(), std::move(r));
}

void GrpcRoutes::LogSettings(std::shared_ptr<const inference::LogSettingsRequest> request,
                             Reply<inference::LogSettingsResponse> reply) const {
  using Value = inference::LogSettingsRequest::SettingValue;
  if (info_.log_settings == nullptr) {
    return Fail(reply, Status::Unsupported("LogSettings: this server has no logging extension"));
  }
  std::vector<std::pair<std::string, logging::LogSettings::Value>> changes;
  for (const auto& [key, value] : request->settings()) {
    switch (value.parameter_choice_case()) {
      case Value::kBoolParam: changes.emplace_back(key, value.bool_param()); break;
      case Value::kUint32Param: changes.emplace_back(key, value.uint32_param()); break;
      case Value::kStringParam: changes.emplace_back(key, value.string_param()); break;
      case Value::PARAMETER_CHOICE_NOT_SET:
        return Fail(reply, Status::InvalidArgument(fmt::format("log setting '{}' has no value", key)));
    }
  }
  if (Status updated = info_.log_settings->Update(changes); !updated.ok()) {
    return Fail(reply, updated);
  }
  const logging::LogState now = info_.log_settings->Current();
  inference::LogSettingsResponse r;
  auto& settings = *r.mutable_settings();
  settings["log_file"].set_string_param(now.file);
  settings["log_info"].set_bool_param(now.info);
  settings["log_warning"].set_bool_param(now.warning);
  settings["log_error"].set_bool_param(now.error);
  settings["log_verbose_level"].set_uint32_param(now.verbose_level);
  settings["log_format"].set_string_param(now.format);
  reply(Ok(), std::move(r));
}

void GrpcRoutes::TraceSetting(std::shared_ptr<const inference::TraceSettingRequest> request,
                              Reply<inference::TraceSettingResponse> reply) const {
  if (info_.tracer == nullptr) {
    return Fail(reply, Status::Unsupported("TraceSetting: this server has no trace extension"));
  }
  trace::TraceSettings& settings = info_.tracer->settings();
  trace::TraceSettings::Changes changes;
  for (const auto& [name, value] : request->settings()) {
    // No value clears a model's setting (back to the global one), as Triton's RPC says.
    if (value.value().empty()) {
      changes.emplace_back(name, std::nullopt);
    } else {
      changes.emplace_back(name,
                           std::vector<std::string>(value.value().begin(), value.value().end()));
    }
  }
  if (Status updated = settings.Update(request->model_name(), changes); !updated.ok()) {
    return Fail(reply, updated);
  }
  inference::TraceSettingResponse r;
  for (const auto& [name, values] : settings.Answer(request->model_name())) {
    auto& out = (*r.mutable_settings())[name];
    for (const std::string& v : values) out.add_value(v);
  }
  reply(Ok(), std::move(r));
}

namespace {

inference::ModelStreamInferResponse StreamError(const Status& status) {
  inference::ModelStreamInferResponse r;
  r.set_error_message(status.message());
  return r;
}

bool WantsEmptyFinal(const inference::ModelInferRequest& m) {
  auto it = m.parameters().find("triton_enable_empty_final_response");
  return it != m.parameters().end() && it->second.has_bool_param() && it->second.bool_param();
}

}  // namespace

void GrpcRoutes::StreamInfer(std::shared_ptr<const inference::ModelInferRequest> message,
                             CallContext call, StreamSend send) const {
  auto version = ParseModelVersion(message->model_version());
  if (!version.ok()) return send(StreamError(version.status()), true);
  auto request = std::make_shared<InferRequest>();
  trace::Tracer* tracer = info_.tracer;
  std::shared_ptr<RequestTrace> trace =
      StartTrace(message->model_name(), call.traceparent, call.received);
  request->trace = trace;  // for an answer before the build, which carries it over
  if (trace != nullptr) {
    // GRPC_SEND_START: the first response handed to the stream; the trace ends with the last.
    send = [send = std::move(send), trace, tracer](
               std::optional<inference::ModelStreamInferResponse> response, bool last) {
      trace->Stamp(TracePoint::kSendStart);
      if (response.has_value() && !response->error_message().empty()) {
        trace->SetError(response->error_message());
      }
      send(std::move(response), last);
      if (last) tracer->Finish(trace);
    };
  }
  const bool empty_final = WantsEmptyFinal(*message);
  // Set by the build step (the version's config says it); read by `done`, which runs after.
  auto decoupled = std::make_shared<bool>(false);
  const shared_memory::SharedMemoryRegions* shm = shared_memory_;
  server::Drain* drain = info_.drain;
  if (drain != nullptr) drain->RequestStarted();
  runtime::InferCallback done = [request, send, empty_final, decoupled, message, shm, drain](
                                    Result<runtime::InferOutcome> outcome) {
    server::EndsRequest ends(drain);
    request->inputs = {};
    if (!outcome.ok()) return send(StreamError(outcome.status()), true);
    inference::ModelStreamInferResponse r;
    if (*decoupled) {
      if (!empty_final) return send(std::nullopt, true);
      auto* final = r.mutable_infer_response();
      final->set_model_name(request->model_name);
      final->set_model_version(std::to_string(request->model_version));
      final->set_id(request->id);
      (*final->mutable_parameters())["triton_final_response"].set_bool_param(true);
      return send(std::move(r), true);
    }
    Status encoded = EncodeInferResponse(outcome->response, *request, r.mutable_infer_response(),
                                         message.get(), shm);
    if (!encoded.ok()) return send(StreamError(encoded), true);
    send(std::move(r), true);
  };
  std::weak_ptr<const InferRequest> weak_request = request;
  const std::string model = message->model_name();
  runtime::InferRouter(manager_).InferAsync(
      model, *version, std::move(request),
      [message, send, decoupled, weak_request, shm, trace, cancel = std::move(call.cancel),
       forwarded = std::move(call.forwarded)](
          const config::ModelConfig& config) -> Result<InferRequest> {
        VRAMD_ASSIGN_OR_RETURN(InferRequest built, DecodeInferRequest(message, shm));
        built.trace = trace;
        built.cancel = cancel;
        built.parameters.insert(built.parameters.end(), forwarded.begin(), forwarded.end());
        *decoupled = IsDecoupled(config);
        if (*decoupled) {
          // Each response as the model sends it, in order, from an instance thread.
          built.stream = [send, weak_request, message, shm](Result<InferResponse> response) {
            if (!response.ok()) return send(StreamError(response.status()), false);
            const auto request = weak_request.lock();
            if (request == nullptr) return;
            inference::ModelStreamInferResponse r;
            Status encoded = EncodeInferResponse(*response, *request, r.mutable_infer_response(),
                                                 message.get(), shm);
            if (!encoded.ok()) return send(StreamError(encoded), false);
            (*r.mutable_infer_response()->mutable_parameters())["triton_final_response"]
                .set_bool_param(false);
            send(std::move(r), false);
          };
        }
        return built;
      },
      std::move(done));
}

namespace {

Status ShmOff(shared_memory::RegionKind kind) {
  return Status::Unsupported(fmt::format(
      "{} shared memory is turned off on this server (--no-grpc-shared-memory)",
      shared_memory::RegionKindName(kind)));
}

}  // namespace

void GrpcRoutes::SystemSharedMemoryRegister(
    std::shared_ptr<const inference::SystemSharedMemoryRegisterRequest> request,
    Reply<inference::SystemSharedMemoryRegisterResponse> reply) const {
  if (shared_memory_ == nullptr) return Fail(reply, ShmOff(shared_memory::RegionKind::kSystem));
  Status s = shared_memory_->RegisterSystem(request->name(), request->key(), request->offset(),
                                   request->byte_size());
  reply(ToGrpcStatus(s), inference::SystemSharedMemoryRegisterResponse());
}

void GrpcRoutes::SystemSharedMemoryStatus(
    std::shared_ptr<const inference::SystemSharedMemoryStatusRequest> request,
    Reply<inference::SystemSharedMemoryStatusResponse> reply) const {
  if (shared_memory_ == nullptr) return Fail(reply, ShmOff(shared_memory::RegionKind::kSystem));
  auto regions = shared_memory_->List(shared_memory::RegionKind::kSystem, request->name());
  if (!regions.ok()) return Fail(reply, regions.status());
  inference::SystemSharedMemoryStatusResponse r;
  for (const auto& region : *regions) {
    auto& status = (*r.mutable_regions())[region.name];
    status.set_name(region.name);
    status.set_key(region.key);
    status.set_offset(region.offset);
    status.set_byte_size(region.byte_size);
  }
  reply(Ok(), std::move(r));
}

void GrpcRoutes::SystemSharedMemoryUnregister(
    std::shared_ptr<const inference::SystemSharedMemoryUnregisterRequest> request,
    Reply<inference::SystemSharedMemoryUnregisterResponse> reply) const {
  if (shared_memory_ == nullptr) return Fail(reply, ShmOff(shared_memory::RegionKind::kSystem));
  reply(ToGrpcStatus(shared_memory_->Unregister(shared_memory::RegionKind::kSystem, request->name())),
        inference::SystemSharedMemoryUnregisterResponse());
}

void GrpcRoutes::CudaSharedMemoryRegister(
    std::shared_ptr<const inference::CudaSharedMemoryRegisterRequest> request,
    Reply<inference::CudaSharedMemoryRegisterResponse> reply) const {
  if (shared_memory_ == nullptr) return Fail(reply, ShmOff(shared_memory::RegionKind::kCuda));
  auto handle = shared_memory::ToIpcHandle(request->raw_handle(),
                                           "CUDA shared memory register: 'raw_handle'");
  if (!handle.ok()) return Fail(reply, handle.status());
  const int64_t device = request->device_id();
  if (device < 0 || device > std::numeric_limits<int>::max()) {
    return Fail(reply, Status::InvalidArgument(fmt::format(
                           "CUDA shared memory region '{}': device {} is not a CUDA device",
                           request->name(), device)));
  }
  Status s = shared_memory_->RegisterCuda(request->name(), *handle, static_cast<int>(device),
                                          request->byte_size());
  reply(ToGrpcStatus(s), inference::CudaSharedMemoryRegisterResponse());
}

void GrpcRoutes::CudaSharedMemoryStatus(
    std::shared_ptr<const inference::CudaSharedMemoryStatusRequest> request,
    Reply<inference::CudaSharedMemoryStatusResponse> reply) const {
  if (shared_memory_ == nullptr) return Fail(reply, ShmOff(shared_memory::RegionKind::kCuda));
  auto regions = shared_memory_->List(shared_memory::RegionKind::kCuda, request->name());
  if (!regions.ok()) return Fail(reply, regions.status());
  inference::CudaSharedMemoryStatusResponse r;
  for (const auto& region : *regions) {
    auto& status = (*r.mutable_regions())[region.name];
    status.set_name(region.name);
    status.set_device_id(region.device_id);
    status.set_byte_size(region.byte_size);
  }
  reply(Ok(), std::move(r));
}

void GrpcRoutes::CudaSharedMemoryUnregister(
    std::shared_ptr<const inference::CudaSharedMemoryUnregisterRequest> request,
    Reply<inference::CudaSharedMemoryUnregisterResponse> reply) const {
  if (shared_memory_ == nullptr) return Fail(reply, ShmOff(shared_memory::RegionKind::kCuda));
  reply(ToGrpcStatus(shared_memory_->Unregister(shared_memory::RegionKind::kCuda, request->name())),
        inference::CudaSharedMemoryUnregisterResponse());
}

void GrpcRoutes::RepositoryIndex(std::shared_ptr<const inference::RepositoryIndexRequest> request,
                                 Reply<inference::RepositoryIndexResponse> reply) const {
  inference::RepositoryIndexResponse r;
  for (const auto& entry : manager_->Index()) {
    if (request->ready() &&
        entry.state != runtime::TritonStateName(runtime::LifecycleState::kReady)) {
      continue;
    }
    auto* m = r.add_models();
    m->set_name(entry.name);
    if (entry.version != 0) m->set_version(std::to_string(entry.version));
    m->set_state(entry.state);
    m->set_reason(entry.reason);
  }
  reply(Ok(), std::move(r));
}

void GrpcRoutes::RepositoryModelLoad(
    std::shared_ptr<const inference::RepositoryModelLoadRequest> request,
    Reply<inference::RepositoryModelLoadResponse> reply) const {
  std::shared_ptr<const config::ModelConfig> config_override;
  runtime::ModelFileOverrides files;
  for (const auto& [key, p] : request->parameters()) {
    if (key.substr(0, 5) == "file:") {
      if (p.parameter_choice_case() != ModelRepositoryParameter::kBytesParam) {
        return Fail(reply, Status::InvalidArgument(fmt::format(
                               "failed to load '{}': parameter '{}' must be bytes_param "
                               "holding the file",
                               request->model_name(), key)));
      }
      files.emplace_back(key.substr(5), p.bytes_param());
      continue;
    }
    if (key != "config") continue;
    if (p.parameter_choice_case() != ModelRepositoryParameter::kStringParam) {
      return Fail(reply, Status::InvalidArgument(fmt::format(
                             "failed to load '{}': parameter 'config' must be a string holding "
                             "the model configuration as JSON",
                             request->model_name())));
    }
    auto parsed = config::ModelConfigFromJson(p.string_param());
    if (!parsed.ok()) {
      return Fail(reply, Status::InvalidArgument(fmt::format(
                             "failed to load '{}': parameter 'config': {}", request->model_name(),
                             parsed.status().message())));
    }
    config_override = std::make_shared<const config::ModelConfig>(std::move(parsed).value());
  }
  if (mutable_manager_ == nullptr) {
    return Fail(reply, Status::InvalidArgument(
                           "explicit model load / unload is not allowed if polling is enabled"));
  }
  control_->Post([this, request, config_override, files = std::move(files),
                  reply = std::move(reply)] {
    Status status = mutable_manager_->Load(request->model_name(), config_override, files);
    reply(ToGrpcStatus(status), inference::RepositoryModelLoadResponse());
  });
}

void GrpcRoutes::RepositoryModelUnload(
    std::shared_ptr<const inference::RepositoryModelUnloadRequest> request,
    Reply<inference::RepositoryModelUnloadResponse> reply) const {
  if (mutable_manager_ == nullptr) {
    return Fail(reply, Status::InvalidArgument(
                           "explicit model load / unload is not allowed if polling is enabled"));
  }
  control_->Post([this, request, reply = std::move(reply)] {
    auto dependents = request->parameters().find("unload_dependents");
    const bool unload_dependents = dependents != request->parameters().end() &&
                                   dependents->second.parameter_choice_case() ==
                                       ModelRepositoryParameter::kBoolParam &&
                                   dependents->second.bool_param();
    Status status = mutable_manager_->Unload(request->model_name(), unload_dependents);
    reply(ToGrpcStatus(status), inference::RepositoryModelUnloadResponse());
  });
}

}  // namespace vramd::grpc_server
