// The KServe v2 HTTP/REST endpoints and Triton's extensions that vramd serves, on top of the
// ModelManager:
//   GET  /v2/health/live, /v2/health/ready (see ServerInfo::strict_readiness), /v2
//   GET  /v2/models/{m}[/versions/{v}]            model metadata
//   GET  /v2/models/{m}[/versions/{v}]/ready
//   GET  /v2/models/{m}[/versions/{v}]/config     the config as JSON (model configuration ext.)
//   POST /v2/models/{m}[/versions/{v}]/infer      JSON and binary tensor data; a decoupled
//                                                 model is refused (501), as Triton does
//   POST /v2/models/{m}[/versions/{v}]/generate[_stream]   generate extension: one JSON
//                                                 answer, or server-sent events
//                                                 (generate_codec.h, generate_answer.h)
//   GET  /v2/models[/{m}[/versions/{v}]]/stats    statistics ext. (stats_routes.h)
//   POST /v2/repository/index                     (model repository extension)
//   POST /v2/repository/models/{m}/load           explicit mode only (else 400); 200, empty body
//   POST /v2/repository/models/{m}/unload         explicit mode only (else 400); 200, empty body
//   GET  /v2/repository/models/{m}/lifecycle      vramd's lifecycle view (lifecycle_routes.h)
//   GET|POST /v2[/models/{m}]/trace/setting        trace extension (server/trace/)
//   POST /v2/repository/models/{m}/rollback|hold|release   rollback (docs/rollback.md)
//   POST /v2/alertmanager                         Alertmanager webhook: rolls back firing models
//   POST /v2/drain                                vramd's drain (server/drain/drain.h): body
//                                                 {"quiet_ms", "timeout_ms"}, both optional
// Load, unload and drain run on the routes' control threads (control_dispatcher.h), not on the HTTP
// I/O thread that received them; a model ready question whose backend checks readiness (up
// to 5 s: LoadedModel::CheckReadyAsync) is answered from the version's probe thread.
//   GET  /v2/memory                               vramd's memory report (docs/memory.md)
//   GET  /v2/systemsharedmemory[/region/{r}]/status   system shared memory extension
//   POST /v2/systemsharedmemory/region/{r}/register   body {"key", "offset", "byte_size"}
//   POST /v2/systemsharedmemory[/region/{r}]/unregister
// Errors are {"error": "..."} with Triton's status codes (HttpStatusFor, http_status.h).
// A restricted endpoint (ServerInfo::restricted) is refused 403 before anything else is looked
// at, its method included, as Triton does.
//
// Thread safety: Handle may be called concurrently.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "memory/memory_report.h"
#include "runtime/model_manager.h"
#include "server/access/restricted_apis.h"
#include "server/headers/header_forwarding.h"
#include "server/http/control_dispatcher.h"
#include "server/http/http_server.h"
#include "server/drain/drain.h"
#include "server/logging/log_settings.h"
#include "server/trace/tracer.h"
#include "server/shared_memory/shared_memory_regions.h"

namespace vramd::http {

// The category of Triton's restricted APIs that an HTTP request's path belongs to (the query
// ignored); nullopt for a path that is no endpoint. vramd's own endpoints fall in the nearest
// of Triton's: /v2/memory is statistics; lifecycle, sleep, wake, rollback, hold, release,
// drain and the Alertmanager webhook are model-repository.
std::optional<server::ApiCategory> HttpApiCategory(std::string_view target);

class KServeRoutes {
 public:
  struct ServerInfo {
    std::string name = "vramd";
    std::string version;
    // Triton's --strict-readiness: /v2/health/ready needs every model ready; otherwise only
    // that the server is up.
    bool strict_readiness = true;
    // Triton's system and CUDA shared memory extensions: the regions (shared with the gRPC
    // front end, outliving the routes); null turns both off over HTTP.
    shared_memory::SharedMemoryRegions* shared_memory = nullptr;
    // Triton's logging extension (GET/POST /v2/logging): the settings, shared with the gRPC
    // front end and outliving the routes; null answers 404.
    logging::LogSettings* log_settings = nullptr;
    // The server's drain (server/drain/drain.h), shared with the gRPC front end: counts
    // inference requests, fails readiness while draining and serves POST /v2/drain; null
    // answers that 404.
    server::Drain* drain = nullptr;
    // Triton's trace extension (GET/POST /v2[/models/{m}]/trace/setting) and the tracing of
    // inference requests; shared with gRPC and outliving every request. Null: both off (404).
    trace::Tracer* tracer = nullptr;
    // Triton's --http-restricted-api: endpoints of a restricted category answer 403 unless the
    // request carries the restriction's header (server/access/restricted_apis.h); the HTTP
    // server must pass it (ReadsHeader). Null: nothing restricted.
    const server::RestrictedApis* restricted = nullptr;
    // Triton's --http-header-forward-pattern: matching headers reach the model as request
    // parameters (infer and generate); the HTTP server must pass them (ReadsHeader). Null:
    // none.
    const server::HeaderForwarding* forward_headers = nullptr;
  };

  // `manager` and `memory_report` must outlive this object. A const manager serves everything
  // but load and unload, which then answer 400.
  KServeRoutes(runtime::ModelManager* manager, const memory::MemoryReportSource* memory_report,
               ServerInfo info);
  KServeRoutes(const runtime::ModelManager* manager, const memory::MemoryReportSource* memory_report,
               ServerInfo info);

  void Handle(HttpRequest request, Responder respond) const;

  // Whether Handle reads header `name` (HttpServer::Options::pass_header): a restriction's key
  // or a header to forward.
  bool ReadsHeader(std::string_view name) const;

 private:
  // 403 when the request's endpoint is restricted and the request lacks the header.
  std::optional<HttpResponse> Refusal(const HttpRequest& request) const;
  HttpResponse Route(const HttpRequest& request) const;
  HttpResponse ServerMetadata() const;
  HttpResponse ModelMetadata(const std::string& model, int64_t version) const;
  // 200 ready, 400 not ready (as Triton), the lookup's error otherwise. `ask_backend` false:
  // a version whose backend checks readiness is not asked, and nullopt says it must be.
  std::optional<HttpResponse> ModelReady(const std::string& model, int64_t version,
                                         bool ask_backend) const;
  HttpResponse ModelConfig(const std::string& model, int64_t version) const;
  // Answers through `respond`, possibly later and from an instance thread.
  void Infer(HttpRequest request, const std::string& model, int64_t version,
             Responder respond) const;
  // As Infer; `streaming`: generate_stream.
  void Generate(HttpRequest request, const std::string& model, int64_t version, bool streaming,
                Responder respond) const;
  HttpResponse RepositoryIndex(const HttpRequest& request) const;
  // GET: the settings; POST with a JSON object of settings: changes them (all or none, as
  // LogSettings::Update), then the settings.
  HttpResponse Logging(const HttpRequest& request) const;
  // GET or POST a trace setting; `model` empty: the global ones.
  HttpResponse TraceSetting(const HttpRequest& request, const std::string& model) const;
  // Blocks until the drain is quiet or times out: a control thread's call.
  HttpResponse DrainResponse(const HttpRequest& request) const;
  // /v2/systemsharedmemory/... or /v2/cudasharedmemory/..., by `kind`.
  HttpResponse SharedMemory(const HttpRequest& request, const std::vector<std::string_view>& parts,
                            shared_memory::RegionKind kind) const;
  HttpResponse RepositoryControl(const HttpRequest& request, const std::string& model,
                                 bool load) const;
  // POST .../sleep or .../wake: puts a model to sleep or wakes it (any control mode).
  // POST .../rollback, .../hold, .../release: a control thread's calls.
  HttpResponse RollbackControl(const HttpRequest& request, const std::string& model,
                               std::string_view action) const;
  // POST /v2/alertmanager: Alertmanager's webhook; each firing alert with a "model" label rolls
  // that model back.
  HttpResponse AlertWebhook(const HttpRequest& request) const;
  HttpResponse SleepControl(const HttpRequest& request, const std::string& model,
                            bool sleep) const;
  // How long a sleep request waits for the model's executions in flight.
  static constexpr std::chrono::milliseconds kSleepWait{30000};

  const runtime::ModelManager* manager_;
  runtime::ModelManager* mutable_manager_ = nullptr;  // null: load and unload are refused
  const memory::MemoryReportSource* memory_report_;
  const ServerInfo info_;
  // Load and unload requests; null with a const manager. Last: joined (answering what was
  // posted) before the rest goes.
  std::unique_ptr<ControlDispatcher> control_;
};

}  // namespace vramd::http
