#include "server/http/kserve_routes.h"

#include <fmt/format.h>
#include <boost/beast/core/string.hpp>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <charconv>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "config/model_config_json.h"
#include "core/data_type.h"
#include "core/json_parse.h"
#include "core/json_write.h"
#include "runtime/infer_router.h"
#include "server/http/base64.h"
#include "server/http/http_status.h"
#include "server/http/generate_answer.h"
#include "server/http/generate_codec.h"
#include "server/http/infer_codec.h"
#include "server/http/lifecycle_routes.h"
#include "server/http/memory_routes.h"
#include "server/http/stats_routes.h"

namespace vramd::http {
namespace {

HttpResponse Json(unsigned status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse Error(unsigned status, std::string_view message) {
  return Json(status, EncodeError(message));
}

HttpResponse Error(const Status& status) {
  return Error(HttpStatusFor(status.code()), status.message());
}

HttpResponse Empty(unsigned status) { return Json(status, ""); }

std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int v = 0;
      auto [p, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
      if (ec == std::errc() && p == s.data() + i + 3) {
        out.push_back(static_cast<char>(v));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::vector<std::string_view> SplitPath(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::vector<std::string_view> parts;
  size_t pos = 0;
  while (pos < target.size()) {
    size_t next = target.find('/', pos);
    if (next == std::string_view::npos) next = target.size();
    if (next > pos) parts.push_back(target.substr(pos, next - pos));
    pos = next + 1;
  }
  return parts;
}

Result<int64_t> ParseVersion(std::string_view text) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v <= 0) {
    return Status::InvalidArgument(
        fmt::format("invalid model version '{}': expected a positive integer", text));
  }
  return v;
}

// POST /v2/models/{m}[/versions/{v}]/{infer,generate,generate_stream}: the model and version
// it names (0: any), or nullopt when the target is none of these or its version is invalid
// (Route answers).
enum class InferKind { kInfer, kGenerate, kGenerateStream };
struct InferTarget {
  std::string model;
  int64_t version = 0;
  InferKind kind = InferKind::kInfer;
};
std::optional<InferTarget> MatchInferTarget(std::string_view target) {
  const auto parts = SplitPath(target);
  if (parts.size() != 4 && parts.size() != 6) return std::nullopt;
  if (parts[0] != "v2" || parts[1] != "models") return std::nullopt;
  InferKind kind;
  if (parts.back() == "infer") {
    kind = InferKind::kInfer;
  } else if (parts.back() == "generate") {
    kind = InferKind::kGenerate;
  } else if (parts.back() == "generate_stream") {
    kind = InferKind::kGenerateStream;
  } else {
    return std::nullopt;
  }
  InferTarget t{PercentDecode(parts[2]), 0, kind};
  if (parts.size() == 6) {
    if (parts[3] != "versions") return std::nullopt;
    auto v = ParseVersion(parts[4]);
    if (!v.ok()) return std::nullopt;
    t.version = *v;
  }
  return t;
}

// The shape a client sends for a config tensor: dims, after a -1 batch dimension if batching.
void WriteClientShape(JsonWriter& w, const config::ModelConfig& config,
                      const google::protobuf::RepeatedField<int64_t>& dims) {
  w.StartArray();
  if (config.max_batch_size() > 0) w.Int64(-1);
  for (int64_t d : dims) w.Int64(d);
  w.EndArray();
}

// A body that is one raw tensor (Inference-Header-Content-Length: 0): allowed for models with
// a single input, treated as batch 1; a single -1 dimension is inferred from the byte size.
Result<InferRequest> ParseRawBinaryRequest(const config::ModelConfig& config,
                                           std::shared_ptr<const std::string> body) {
  if (config.input_size() != 1) {
    return Status::InvalidArgument(fmt::format(
        "a raw binary request (Inference-Header-Content-Length: 0) needs a model with exactly "
        "one input; model '{}' has {}",
        config.name(), config.input_size()));
  }
  const auto& input = config.input(0);
  const auto type = static_cast<DataType>(input.data_type());
  Tensor t;
  t.name = input.name();
  t.datatype = type;
  if (config.max_batch_size() > 0) t.shape.push_back(1);
  int unknown = -1;
  int64_t known = 1;
  for (int64_t d : input.dims()) {
    if (d < 0) {
      if (unknown >= 0 || DataTypeByteSize(type) == 0) {
        return Status::InvalidArgument(fmt::format(
            "input '{}': a raw binary request cannot infer the shape of dims [{}] for {}",
            input.name(), fmt::join(input.dims(), ","), DataTypeWireName(type)));
      }
      unknown = static_cast<int>(t.shape.size());
      t.shape.push_back(0);
    } else {
      known *= d;
      t.shape.push_back(d);
    }
  }
  if (unknown >= 0) {
    size_t per = DataTypeByteSize(type) * static_cast<size_t>(known);
    if (per == 0 || body->size() % per != 0) {
      return Status::InvalidArgument(fmt::format(
          "input '{}': raw binary body of {} bytes is not a whole number of {}-byte rows",
          input.name(), body->size(), per));
    }
    t.shape[unknown] = static_cast<int64_t>(body->size() / per);
  }
  auto* data = reinterpret_cast<const std::byte*>(body->data());
  size_t size = body->size();
  t.data = SharedBuffer::View(std::move(body), data, size);
  InferRequest request;
  request.inputs.push_back(std::move(t));
  request.binary_data_output = true;
  return request;
}

}  // namespace

KServeRoutes::KServeRoutes(const runtime::ModelManager* manager,
                           const memory::MemoryReportSource* memory_report, ServerInfo info)
    : manager_(manager), memory_report_(memory_report), info_(std::move(info)) {}

KServeRoutes::KServeRoutes(runtime::ModelManager* manager,
                           const memory::MemoryReportSource* memory_report, ServerInfo info)
    : KServeRoutes(static_cast<const runtime::ModelManager*>(manager), memory_report,
                   std::move(info)) {
  mutable_manager_ = manager;
  // As many control threads as loads may run at once are enough: more would only queue.
  control_ = std::make_unique<ControlDispatcher>(4);
}

std::optional<server::ApiCategory> HttpApiCategory(std::string_view target) {
  using server::ApiCategory;
  const auto parts = SplitPath(target);
  if (parts.empty() || parts[0] != "v2") return std::nullopt;
  if (parts.size() == 1) return ApiCategory::kMetadata;
  const std::string_view area = parts[1];
  if (area == "health") return ApiCategory::kHealth;
  if (area == "systemsharedmemory" || area == "cudasharedmemory") {
    return ApiCategory::kSharedMemory;
  }
  if (area == "repository" || area == "drain" || area == "alertmanager") {
    return ApiCategory::kModelRepository;
  }
  if (area == "logging") return ApiCategory::kLogging;
  if (area == "trace") return ApiCategory::kTrace;
  if (area == "memory") return ApiCategory::kStatistics;
  if (area != "models") return std::nullopt;
  if (parts.size() == 3 && parts[2] == "stats") return ApiCategory::kStatistics;
  size_t next = 3;  // after /v2/models/{m}[/versions/{v}]
  if (parts.size() >= 5 && parts[3] == "versions") next = 5;
  if (parts.size() == next) return ApiCategory::kMetadata;
  if (parts.size() < next) return std::nullopt;
  const std::string_view action = parts[next];
  if (action == "trace") return ApiCategory::kTrace;
  if (parts.size() != next + 1) return std::nullopt;
  if (action == "ready") return ApiCategory::kHealth;
  if (action == "config") return ApiCategory::kModelConfig;
  if (action == "stats") return ApiCategory::kStatistics;
  if (action == "infer" || action == "generate" || action == "generate_stream") {
    return ApiCategory::kInference;
  }
  return std::nullopt;
}

std::optional<HttpResponse> KServeRoutes::Refusal(const HttpRequest& request) const {
  const auto category = HttpApiCategory(request.target);
  if (!category.has_value()) return std::nullopt;
  const auto* restriction = info_.restricted->Find(*category);
  if (restriction == nullptr) return std::nullopt;
  for (const auto& [name, value] : request.headers) {
    if (boost::beast::iequals(name, restriction->header)) {
      if (value == restriction->value) return std::nullopt;
      break;  // only the first of the name counts
    }
  }
  return Error(403, server::RestrictedApis::RefusalMessage(*restriction, /*grpc=*/false));
}

bool KServeRoutes::ReadsHeader(std::string_view name) const {
  return (info_.restricted != nullptr && info_.restricted->ReadsHeader(name)) ||
         (info_.forward_headers != nullptr && info_.forward_headers->Matches(name));
}

void KServeRoutes::Handle(HttpRequest request, Responder respond) const {
  if (info_.restricted != nullptr) {
    if (auto refused = Refusal(request)) return respond(std::move(*refused));
  }
  if (request.method == "POST") {
    if (auto infer = MatchInferTarget(request.target)) {  // answered later
      if (infer->kind == InferKind::kInfer) {
        Infer(std::move(request), infer->model, infer->version, std::move(respond));
      } else {
        Generate(std::move(request), infer->model, infer->version,
                 infer->kind == InferKind::kGenerateStream, std::move(respond));
      }
      return;
    }
    const auto parts = SplitPath(request.target);
    const bool control_call = parts.size() == 5 && parts[0] == "v2" &&
                              parts[1] == "repository" && parts[2] == "models" &&
                              (parts[4] == "load" || parts[4] == "unload" ||
                               parts[4] == "sleep" || parts[4] == "wake" ||
                               parts[4] == "rollback" || parts[4] == "hold" ||
                               parts[4] == "release");
    const bool drain_call = parts.size() == 2 && parts[0] == "v2" &&
                            ((parts[1] == "drain" && info_.drain != nullptr) ||
                             parts[1] == "alertmanager");
    if (control_ != nullptr && (control_call || drain_call)) {
      control_->Post([this, request = std::move(request), respond = std::move(respond)] {
        respond(Route(request));
      });
      return;
    }
  }
  if (request.method == "GET") {
    // A model ready question: answered here unless the version's backend must be asked, which
    // may take seconds and so runs on a readiness thread, not on this I/O thread.
    const auto parts = SplitPath(request.target);
    const bool versioned = parts.size() == 6 && parts[3] == "versions";
    if ((parts.size() == 4 || versioned) && parts[0] == "v2" && parts[1] == "models" &&
        parts.back() == "ready") {
      int64_t version = 0;
      if (versioned) {
        auto v = ParseVersion(parts[4]);
        if (!v.ok()) return respond(Error(v.status()));
        version = *v;
      }
      auto found = manager_->Find(PercentDecode(parts[2]), version);
      if (!found.ok() || !(*found)->ChecksReadiness()) {
        return respond(*ModelReady(PercentDecode(parts[2]), version, /*ask_backend=*/false));
      }
      // Answered from the probe's threads, at most 5 s later (or at once if the version goes
      // meanwhile: its probe answers what is pending). Nothing here holds the version: its
      // last reference must never drop on its own probe's thread.
      (*found)->CheckReadyAsync([respond = std::move(respond)](Status ready) {
        respond(Empty(ready.ok() ? 200 : 400));
      });
      return;
    }
  }
  respond(Route(request));
}

HttpResponse KServeRoutes::Route(const HttpRequest& request) const {
  const auto parts = SplitPath(request.target);
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  auto method_not_allowed = [&] {
    return Error(405, fmt::format("method {} is not allowed on '{}'", request.method,
                                  request.target));
  };
  if (parts.empty() || parts[0] != "v2") {
    return Error(404, fmt::format("no endpoint at '{}'", request.target));
  }
  if (parts.size() == 1) return get ? ServerMetadata() : method_not_allowed();
  if (parts[1] == "health" && parts.size() == 3) {
    if (!get) return method_not_allowed();
    if (parts[2] == "live") return Empty(200);
    if (parts[2] == "ready") {
      // Not ready while draining: a load balancer's probe takes the server out of rotation
      // while it still serves what arrives. 503, not Triton's 400: the server is going away.
      if (info_.drain != nullptr && info_.drain->draining()) {
        return Error(503, "vramd is draining: it serves requests that still arrive but asks "
                          "to be taken out of rotation");
      }
      return Empty(!info_.strict_readiness || manager_->AllModelsReady() ? 200 : 400);
    }
  }
  if (parts[1] == "systemsharedmemory") {
    return SharedMemory(request, parts, shared_memory::RegionKind::kSystem);
  }
  if (parts[1] == "cudasharedmemory") {
    return SharedMemory(request, parts, shared_memory::RegionKind::kCuda);
  }
  if (parts[1] == "logging" && parts.size() == 2) {
    return get || post ? Logging(request) : method_not_allowed();
  }
  if (parts[1] == "trace" && parts.size() == 3 && parts[2] == "setting") {
    return get || post ? TraceSetting(request, "") : method_not_allowed();
  }
  if (parts[1] == "models" && parts.size() == 5 && parts[3] == "trace" && parts[4] == "setting") {
    return get || post ? TraceSetting(request, PercentDecode(parts[2])) : method_not_allowed();
  }
  if (parts[1] == "drain" && parts.size() == 2 && info_.drain != nullptr && control_) {
    return post ? DrainResponse(request) : method_not_allowed();
  }
  if (parts[1] == "memory" && parts.size() == 2) {
    return get ? MemoryReportResponse(*memory_report_) : method_not_allowed();
  }
  if (parts[1] == "repository" && parts.size() == 3 && parts[2] == "index") {
    return post ? RepositoryIndex(request) : method_not_allowed();
  }
  if (parts[1] == "repository" && parts.size() == 5 && parts[2] == "models" &&
      parts[4] == "lifecycle") {
    return get ? ModelLifecycleResponse(*manager_, PercentDecode(parts[3]))
               : method_not_allowed();
  }
  if (parts[1] == "repository" && parts.size() == 5 && parts[2] == "models" &&
      (parts[4] == "load" || parts[4] == "unload")) {
    return post ? RepositoryControl(request, PercentDecode(parts[3]), parts[4] == "load")
                : method_not_allowed();
  }
  if (parts[1] == "repository" && parts.size() == 5 && parts[2] == "models" &&
      (parts[4] == "rollback" || parts[4] == "hold" || parts[4] == "release")) {
    if (!post) return method_not_allowed();
    if (mutable_manager_ == nullptr || control_ == nullptr) {
      return Error(400, "this server's models cannot be rolled back or held");
    }
    return RollbackControl(request, PercentDecode(parts[3]), parts[4]);
  }
  if (parts[1] == "alertmanager" && parts.size() == 2) {
    if (!post) return method_not_allowed();
    if (mutable_manager_ == nullptr || control_ == nullptr) {
      return Error(400, "this server's models cannot be rolled back");
    }
    return AlertWebhook(request);
  }
  if (parts[1] == "repository" && parts.size() == 5 && parts[2] == "models" &&
      (parts[4] == "sleep" || parts[4] == "wake")) {
    return post ? SleepControl(request, PercentDecode(parts[3]), parts[4] == "sleep")
                : method_not_allowed();
  }
  if (parts[1] == "models" && parts.size() == 3 && parts[2] == "stats") {
    return get ? ModelStatsResponse(*manager_, "", 0) : method_not_allowed();
  }
  if (parts[1] == "models" && parts.size() >= 3) {
    const std::string model = PercentDecode(parts[2]);
    size_t next = 3;
    int64_t version = 0;
    if (parts.size() >= 5 && parts[3] == "versions") {
      auto v = ParseVersion(parts[4]);
      if (!v.ok()) return Error(v.status());
      version = *v;
      next = 5;
    }
    if (parts.size() == next) return get ? ModelMetadata(model, version) : method_not_allowed();
    if (parts.size() == next + 1) {
      std::string_view action = parts[next];
      if (action == "ready") {
        return get ? *ModelReady(model, version, /*ask_backend=*/true) : method_not_allowed();
      }
      if (action == "config") return get ? ModelConfig(model, version) : method_not_allowed();
      // POST is Handle's (asynchronous)
      if (action == "infer" || action == "generate" || action == "generate_stream") {
        return method_not_allowed();
      }
      if (action == "stats") {
        return get ? ModelStatsResponse(*manager_, model, version) : method_not_allowed();
      }
    }
  }
  return Error(404, fmt::format("no endpoint at '{}'", request.target));
}

HttpResponse KServeRoutes::ServerMetadata() const {
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartObject();
  w.Key("name");
  WriteJsonString(w, info_.name);
  w.Key("version");
  WriteJsonString(w, info_.version);
  w.Key("extensions");
  w.StartArray();
  for (const char* e : {"binary_tensor_data", "classification", "model_configuration",
                        "model_repository", "parameters", "statistics"}) {
    w.String(e);
  }
  if (info_.shared_memory != nullptr) {
    w.String("system_shared_memory");
    w.String("cuda_shared_memory");
  }
  if (info_.tracer != nullptr) w.String("trace");
  w.EndArray();
  w.EndObject();
  return Json(200, sb.GetString());
}

HttpResponse KServeRoutes::ModelMetadata(const std::string& model, int64_t version) const {
  auto found = manager_->Find(model, version);
  if (!found.ok()) return Error(found.status());
  const config::ModelConfig& config = (*found)->config();
  auto versions = manager_->ReadyVersions(model);

  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartObject();
  w.Key("name");
  WriteJsonString(w, config.name());
  w.Key("versions");
  w.StartArray();
  if (version != 0) {
    WriteJsonString(w, std::to_string(version));
  } else if (versions.ok()) {
    for (int64_t v : *versions) WriteJsonString(w, std::to_string(v));
  }
  w.EndArray();
  w.Key("platform");
  WriteJsonString(w, config.platform().empty() ? config.backend() : config.platform());
  auto write_tensors = [&](const char* key, const auto& tensors) {
    w.Key(key);
    w.StartArray();
    for (const auto& t : tensors) {
      w.StartObject();
      w.Key("name");
      WriteJsonString(w, t.name());
      w.Key("datatype");
      WriteJsonString(w, DataTypeWireName(static_cast<DataType>(t.data_type())));
      w.Key("shape");
      WriteClientShape(w, config, t.dims());
      w.EndObject();
    }
    w.EndArray();
  };
  write_tensors("inputs", config.input());
  write_tensors("outputs", config.output());
  w.EndObject();
  return Json(200, sb.GetString());
}

std::optional<HttpResponse> KServeRoutes::ModelReady(const std::string& model, int64_t version,
                                                     bool ask_backend) const {
  auto found = manager_->Find(model, version);
  if (found.ok()) {
    if (!(*found)->ChecksReadiness()) return Empty((*found)->Available().ok() ? 200 : 400);
    if (!ask_backend) return std::nullopt;
    return Empty((*found)->CheckReady().ok() ? 200 : 400);
  }
  if (found.status().code() == StatusCode::kNotFound) return Error(found.status());
  return Empty(400);
}

HttpResponse KServeRoutes::ModelConfig(const std::string& model, int64_t version) const {
  if (version != 0) {
    auto found = manager_->Find(model, version);
    if (!found.ok()) return Error(found.status());
    return Json(200, config::ModelConfigToJson((*found)->placed_config()));
  }
  auto config = manager_->FindConfig(model);
  if (!config.ok()) return Error(config.status());
  return Json(200, config::ModelConfigToJson(**config));
}

namespace {

// Triton's HTTP infer endpoint refuses a decoupled model (HTTPAPIServer::CheckTransactionPolicy,
// UNSUPPORTED, so 501): it answers one response per request. generate and generate_stream
// take one.
bool IsDecoupled(const config::ModelConfig& config) {
  return config.has_model_transaction_policy() && config.model_transaction_policy().decoupled();
}

// The request `http` carries, for a version whose config is `config` (a raw binary body is
// parsed against its inputs).
Result<InferRequest> ParseHttpInferRequest(const HttpRequest& http,
                                           const config::ModelConfig& config,
                                           const SharedMemoryContext* shm) {
  if (IsDecoupled(config)) {
    return Status::Unsupported(
        "HTTP end point doesn't support models with decoupled transaction policy");
  }
  if (!http.inference_header_length) return ParseInferRequest(http.body, std::nullopt, shm);
  const std::string& text = *http.inference_header_length;
  size_t length = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), length);
  if (ec != std::errc() || p != text.data() + text.size()) {
    return Status::InvalidArgument(
        fmt::format("Inference-Header-Content-Length '{}' is not a byte count", text));
  }
  return length == 0 ? ParseRawBinaryRequest(config, http.body)
                     : ParseInferRequest(http.body, length, shm);
}

}  // namespace

void KServeRoutes::Infer(HttpRequest http, const std::string& model, int64_t version,
                         Responder respond) const {
  auto request = std::make_shared<InferRequest>();
  // Outputs the client placed in shared memory: filled by the parse, written by the encoder.
  auto placed = std::make_shared<std::vector<shared_memory::TensorPlacement>>();
  const shared_memory::SharedMemoryRegions* shm = info_.shared_memory;
  // Run by the model's scheduler, possibly on an instance thread, which then encodes and
  // responds (a Responder may be called from any thread). The outcome holds the request's
  // ledger owner: it closes (checking for leaks) when `outcome` goes out of scope, after the
  // response has been encoded and its tensors released. The callback holds the request (the
  // encoder needs its id and output choices) but not the model, and nothing of the routes: a
  // request parked in a reload's gap may be answered after they are gone.
  server::Drain* drain = info_.drain;
  if (drain != nullptr) drain->RequestStarted();
  trace::Tracer* tracer = info_.tracer;
  std::shared_ptr<RequestTrace> trace =
      tracer != nullptr ? tracer->Start(model, TraceProtocol::kHttp, http.traceparent, http.received)
                        : nullptr;
  // Answers through `respond`; a trace is finished once the reply has been written.
  auto reply = [trace, tracer](const Responder& respond, HttpResponse r) {
    if (trace != nullptr) {
      trace->Stamp(TracePoint::kSendStart);
      r.written = [trace, tracer] { tracer->Finish(trace); };
    }
    respond(std::move(r));
  };
  runtime::InferCallback done = [request, placed, shm, drain, reply, respond = std::move(respond)](
                                    Result<runtime::InferOutcome> outcome) {
    server::EndsRequest ends(drain);
    // The runtime is done with the inputs once it answers (infer_outcome.h). They are views
    // into the request body, which can be as large as the output: dropping them frees it
    // before the reply is written next to the output, rather than holding all three at the
    // peak (unless the HTTP thread that read it is still below us, on the fast path, which
    // the scheduler keeps for executions far shorter than encoding a large reply).
    request->inputs = {};
    if (!outcome.ok()) {
      if (request->trace) request->trace->SetError(outcome.status().message());
      return reply(respond, Error(outcome.status()));
    }
    auto encoded = EncodeInferResponse(outcome->response, *request, placed.get(), shm);
    if (!encoded.ok()) return reply(respond, Error(encoded.status()));
    HttpResponse r = Json(200, std::move(encoded->body));
    r.inference_header_length = encoded->json_length;
    if (encoded->json_length) r.content_type = "application/octet-stream";
    reply(respond, std::move(r));
  };
  request->trace = trace;  // for an answer before the build, which carries it over
  // During a resource-preserving reload the router parks the request (not this I/O thread)
  // until the new version serves; the body waits with it, in the build step.
  runtime::InferRouter(manager_).InferAsync(
      model, version, std::move(request),
      [http = std::move(http), placed, shm, trace,
       forward = info_.forward_headers](const config::ModelConfig& config) {
        placed->clear();  // built at most once, but a gap may delay it: nothing carries over
        const SharedMemoryContext context{shm, placed.get()};
        Result<InferRequest> built = ParseHttpInferRequest(http, config, &context);
        if (built.ok()) {
          if (forward != nullptr) forward->Forward(http.headers, &built->parameters);
          built->cancel = http.cancel;
          built->trace = trace;
          if (!placed->empty()) {
            built->output_buffer =
                shared_memory::PlacedOutputBuffers(shm, placed, built->inputs);
          }
        }
        return built;
      },
      std::move(done));
}

void KServeRoutes::Generate(HttpRequest http, const std::string& model, int64_t version,
                            bool streaming, Responder respond) const {
  // As Infer's callback: the inputs go first, then the answer is encoded from the outcome,
  // whose owner closes after it. For a decoupled model the responses went to the answer
  // already (the stream below) and this ends it. A trace is finished by the answer, once its
  // last part has been written.
  server::Drain* drain = info_.drain;
  if (drain != nullptr) drain->RequestStarted();
  trace::Tracer* tracer = info_.tracer;
  std::shared_ptr<RequestTrace> trace =
      tracer != nullptr ? tracer->Start(model, TraceProtocol::kHttp, http.traceparent, http.received)
                        : nullptr;
  auto answer = std::make_shared<GenerateAnswer>(std::move(respond), streaming, model, trace, tracer);
  auto request = std::make_shared<InferRequest>();
  request->trace = trace;  // for an answer before the build, which carries it over
  runtime::InferCallback done = [answer, request, drain](Result<runtime::InferOutcome> outcome) {
    server::EndsRequest ends(drain);
    request->inputs = {};
    if (!outcome.ok()) return answer->Finish(outcome.status(), nullptr, request->model_version);
    answer->Finish(Status::Ok(), &outcome->response, request->model_version);
  };
  // The stream refers to the request weakly: the request holds the stream.
  std::weak_ptr<const InferRequest> weak_request = request;
  runtime::InferRouter(manager_).InferAsync(
      model, version, std::move(request),
      [http = std::move(http), answer, weak_request, trace,
       forward = info_.forward_headers](const config::ModelConfig& config) {
        Result<InferRequest> built = ParseGenerateRequest(*http.body, config);
        if (!built.ok()) return built;
        if (forward != nullptr) forward->Forward(http.headers, &built->parameters);
        built->cancel = http.cancel;
        built->trace = trace;
        const bool decoupled = IsDecoupled(config);
        answer->SetDecoupled(decoupled);
        if (decoupled) {
          // Called on an instance thread for each response, in order; encodes and queues it.
          built->stream = [answer, weak_request](Result<InferResponse> response) {
            const auto request = weak_request.lock();
            answer->OnResponse(std::move(response), request ? request->model_version : 0);
          };
        }
        return built;
      },
      std::move(done));
}

HttpResponse KServeRoutes::SharedMemory(const HttpRequest& request,
                                        const std::vector<std::string_view>& parts,
                                        shared_memory::RegionKind kind) const {
  using shared_memory::RegionKind;
  const bool cuda = kind == RegionKind::kCuda;
  const std::string what = cuda ? "CUDA shared memory" : "system shared memory";
  shared_memory::SharedMemoryRegions* shm = info_.shared_memory;
  if (shm == nullptr) {
    return Error(Status::Unsupported(
        fmt::format("{} is turned off on this server (--no-http-shared-memory)", what)));
  }
  // /v2/<kind>sharedmemory/<action> or /v2/<kind>sharedmemory/region/<name>/<action>
  std::string region;
  std::string_view action;
  if (parts.size() == 3) {
    action = parts[2];
  } else if (parts.size() == 5 && parts[2] == "region") {
    region = PercentDecode(parts[3]);
    action = parts[4];
  } else {
    return Error(404, fmt::format("no endpoint at '{}'", request.target));
  }
  const bool get = request.method == "GET";
  const bool post = request.method == "POST";
  auto method_not_allowed = [&] {
    return Error(405, fmt::format("method {} is not allowed on '{}'", request.method,
                                  request.target));
  };
  if (action == "status") {
    if (!get) return method_not_allowed();
    auto regions = shm->List(kind, region);
    if (!regions.ok()) return Error(regions.status());
    rapidjson::StringBuffer sb;
    JsonWriter w(sb);
    w.StartArray();
    for (const auto& r : *regions) {
      w.StartObject();
      w.Key("name");
      WriteJsonString(w, r.name);
      if (cuda) {
        w.Key("device_id");
        w.Int(r.device_id);
      } else {
        w.Key("key");
        WriteJsonString(w, r.key);
        w.Key("offset");
        w.Uint64(r.offset);
      }
      w.Key("byte_size");
      w.Uint64(r.byte_size);
      w.EndObject();
    }
    w.EndArray();
    return Json(200, sb.GetString());
  }
  if (action == "unregister") {
    if (!post) return method_not_allowed();
    Status s = shm->Unregister(kind, region);
    return s.ok() ? Empty(200) : Error(s);
  }
  if (action == "register" && !region.empty()) {
    if (!post) return method_not_allowed();
    const std::string not_object = fmt::format("{} register: the body must be a JSON object", what);
    if (!request.body || request.body->empty()) return Error(400, not_object);
    auto parsed = ParseJson(*request.body, what + " register request body");
    if (!parsed.ok()) return Error(parsed.status());
    const rapidjson::Document& doc = *parsed;
    if (!doc.IsObject()) return Error(400, not_object);
    auto size = doc.FindMember("byte_size");
    if (size == doc.MemberEnd() || !size->value.IsUint64()) {
      return Error(400, fmt::format("{} register: 'byte_size' must be a non-negative integer", what));
    }
    if (cuda) {
      auto handle = doc.FindMember("raw_handle");
      auto device = doc.FindMember("device_id");
      const rapidjson::Value* b64 = nullptr;
      if (handle != doc.MemberEnd() && handle->value.IsObject()) {
        auto it = handle->value.FindMember("b64");
        if (it != handle->value.MemberEnd() && it->value.IsString()) b64 = &it->value;
      }
      if (b64 == nullptr) {
        return Error(400, fmt::format("{} register: 'raw_handle' must be an object with a 'b64' string", what));
      }
      if (device == doc.MemberEnd() || !device->value.IsInt()) {
        return Error(400, fmt::format("{} register: 'device_id' must be an integer", what));
      }
      auto raw = DecodeBase64(std::string_view(b64->GetString(), b64->GetStringLength()));
      if (!raw.ok()) return Error(raw.status().WithContext(what + " register: 'raw_handle'"));
      auto ipc = shared_memory::ToIpcHandle(*raw, what + " register: 'raw_handle'");
      if (!ipc.ok()) return Error(ipc.status());
      Status s = shm->RegisterCuda(region, *ipc, device->value.GetInt(), size->value.GetUint64());
      return s.ok() ? Empty(200) : Error(s);
    }
    auto key = doc.FindMember("key");
    auto offset = doc.FindMember("offset");
    if (key == doc.MemberEnd() || !key->value.IsString()) {
      return Error(400, fmt::format("{} register: 'key' must be a string", what));
    }
    if (offset != doc.MemberEnd() && !offset->value.IsUint64()) {
      return Error(400, fmt::format("{} register: 'offset' must be a non-negative integer", what));
    }
    Status s = shm->RegisterSystem(region,
                                   std::string(key->value.GetString(), key->value.GetStringLength()),
                                   offset != doc.MemberEnd() ? offset->value.GetUint64() : 0,
                                   size->value.GetUint64());
    return s.ok() ? Empty(200) : Error(s);
  }
  return Error(404, fmt::format("no endpoint at '{}'", request.target));
}

HttpResponse KServeRoutes::Logging(const HttpRequest& request) const {
  if (info_.log_settings == nullptr) return Error(404, "this server has no logging extension");
  if (request.method == "POST") {
    auto parsed = ParseJson(request.body ? *request.body : std::string(), "logging request body");
    if (!parsed.ok()) return Error(parsed.status());
    const rapidjson::Document& doc = *parsed;
    if (!doc.IsObject()) return Error(400, "logging request body must be a JSON object");
    std::vector<std::pair<std::string, logging::LogSettings::Value>> changes;
    for (const auto& m : doc.GetObject()) {
      std::string name(m.name.GetString(), m.name.GetStringLength());
      if (m.value.IsBool()) {
        changes.emplace_back(std::move(name), m.value.GetBool());
      } else if (m.value.IsUint()) {
        changes.emplace_back(std::move(name), static_cast<uint32_t>(m.value.GetUint()));
      } else if (m.value.IsString()) {
        changes.emplace_back(std::move(name),
                             std::string(m.value.GetString(), m.value.GetStringLength()));
      } else {
        return Error(400, fmt::format("log setting '{}' must be a boolean, a non-negative "
                                      "integer or a string",
                                      name));
      }
    }
    if (Status updated = info_.log_settings->Update(changes); !updated.ok()) return Error(updated);
  }
  const logging::LogState now = info_.log_settings->Current();
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartObject();
  w.Key("log_file");
  WriteJsonString(w, now.file);
  w.Key("log_info");
  w.Bool(now.info);
  w.Key("log_warning");
  w.Bool(now.warning);
  w.Key("log_error");
  w.Bool(now.error);
  w.Key("log_verbose_level");
  w.Uint(now.verbose_level);
  w.Key("log_format");
  WriteJsonString(w, now.format);
  w.EndObject();
  return Json(200, sb.GetString());
}

HttpResponse KServeRoutes::TraceSetting(const HttpRequest& request,
                                        const std::string& model) const {
  if (info_.tracer == nullptr) return Error(404, "this server has no trace extension");
  trace::TraceSettings& settings = info_.tracer->settings();
  if (request.method == "POST") {
    auto parsed = ParseJson(request.body ? *request.body : std::string(), "trace setting body");
    if (!parsed.ok()) return Error(parsed.status());
    const rapidjson::Document& doc = *parsed;
    if (!doc.IsObject()) return Error(400, "trace setting body must be a JSON object");
    // A value is a string, a list of strings, a number (as its text), or null (back to the
    // global value).
    auto text = [](const rapidjson::Value& v) -> std::optional<std::string> {
      if (v.IsString()) return std::string(v.GetString(), v.GetStringLength());
      if (v.IsInt64()) return std::to_string(v.GetInt64());
      if (v.IsUint64()) return std::to_string(v.GetUint64());
      return std::nullopt;
    };
    trace::TraceSettings::Changes changes;
    for (const auto& m : doc.GetObject()) {
      std::string name(m.name.GetString(), m.name.GetStringLength());
      if (m.value.IsNull()) {
        changes.emplace_back(std::move(name), std::nullopt);
        continue;
      }
      std::vector<std::string> values;
      bool valid = true;
      if (m.value.IsArray()) {
        for (const auto& item : m.value.GetArray()) {
          auto t = text(item);
          valid = valid && t.has_value();
          if (t) values.push_back(std::move(*t));
        }
      } else if (auto t = text(m.value)) {
        values.push_back(std::move(*t));
      } else {
        valid = false;
      }
      if (!valid) {
        return Error(400, fmt::format("trace setting '{}' must be a string, a list of strings "
                                      "or null",
                                      name));
      }
      changes.emplace_back(std::move(name), std::move(values));
    }
    if (Status updated = settings.Update(model, changes); !updated.ok()) return Error(updated);
  }
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartObject();
  for (const auto& [name, values] : settings.Answer(model)) {
    WriteJsonKey(w, name);
    if (name == "trace_level") {
      w.StartArray();
      for (const std::string& v : values) WriteJsonString(w, v);
      w.EndArray();
    } else {
      WriteJsonString(w, values.empty() ? std::string() : values.front());
    }
  }
  w.EndObject();
  return Json(200, sb.GetString());
}

HttpResponse KServeRoutes::DrainResponse(const HttpRequest& request) const {
  // Defaults fit a preStop hook: a second of no traffic, within Kubernetes' default 30 s grace.
  uint64_t quiet_ms = 1000;
  uint64_t timeout_ms = 30000;
  if (request.body != nullptr && !request.body->empty()) {
    auto parsed = ParseJson(*request.body, "drain request body");
    if (!parsed.ok()) return Error(parsed.status());
    const rapidjson::Document& doc = *parsed;
    if (!doc.IsObject()) return Error(400, "drain request body must be a JSON object");
    for (const auto& m : doc.GetObject()) {
      const std::string_view name(m.name.GetString(), m.name.GetStringLength());
      uint64_t* field = name == "quiet_ms" ? &quiet_ms : name == "timeout_ms" ? &timeout_ms : nullptr;
      if (field == nullptr) {
        return Error(400, fmt::format("drain request: unknown field '{}' (quiet_ms, timeout_ms)",
                                      name));
      }
      // A day bounds both: a longer wait is a typo, and it keeps the sum from overflowing.
      if (!m.value.IsUint64() || m.value.GetUint64() > 86'400'000) {
        return Error(400, fmt::format("drain request: '{}' must be a whole number of "
                                      "milliseconds from 0 to 86400000",
                                      name));
      }
      *field = m.value.GetUint64();
    }
  }
  const server::Drain::Outcome outcome = info_.drain->BeginAndWait(
      std::chrono::milliseconds(quiet_ms), std::chrono::milliseconds(timeout_ms));
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartObject();
  w.Key("draining");
  w.Bool(true);
  w.Key("quiet");
  w.Bool(outcome.quiet);
  w.Key("in_flight");
  w.Uint64(outcome.in_flight);
  w.Key("waited_ms");
  w.Uint64(static_cast<uint64_t>(outcome.waited.count()));
  w.EndObject();
  return Json(200, sb.GetString());
}

HttpResponse KServeRoutes::RepositoryIndex(const HttpRequest& request) const {
  bool ready_only = false;
  if (request.body && !request.body->empty()) {
    auto parsed = ParseJson(*request.body, "repository index request body");
    if (!parsed.ok()) return Error(parsed.status());
    const rapidjson::Document& doc = *parsed;
    if (!doc.IsObject()) return Error(400, "repository index request body must be a JSON object");
    auto it = doc.FindMember("ready");
    if (it != doc.MemberEnd()) {
      if (!it->value.IsBool()) return Error(400, "repository index: 'ready' must be a boolean");
      ready_only = it->value.GetBool();
    }
  }
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartArray();
  for (const auto& entry : manager_->Index()) {
    // The state, not the lifecycle: a ready version that cannot serve now is not listed.
    if (ready_only && entry.state != runtime::TritonStateName(runtime::LifecycleState::kReady)) continue;
    w.StartObject();
    w.Key("name");
    WriteJsonString(w, entry.name);
    if (entry.version != 0) {
      w.Key("version");
      WriteJsonString(w, std::to_string(entry.version));
    }
    w.Key("state");
    WriteJsonString(w, entry.state);
    w.Key("reason");
    WriteJsonString(w, entry.reason);
    w.Key("lifecycle");  // vramd's exact state (docs/model-control.md); clients ignore it
    WriteJsonString(w, runtime::LifecycleStateName(entry.lifecycle));
    if (!entry.sleep.empty()) {  // docs/memory.md, "Sleeping models"
      w.Key("sleep");
      WriteJsonString(w, entry.sleep);
    }
    w.EndObject();
  }
  w.EndArray();
  return Json(200, sb.GetString());
}

namespace {

// The "parameters" object of a repository action's optional JSON body ({"parameters": {...}}),
// as its own document; an empty object without a body or without "parameters". InvalidArgument
// naming the action `what` for a body that is not such an object.
Result<rapidjson::Document> ControlParameters(const HttpRequest& request, const char* what) {
  rapidjson::Document parameters;
  parameters.SetObject();
  if (!request.body || request.body->empty()) return parameters;
  VRAMD_ASSIGN_OR_RETURN(rapidjson::Document doc,
                         ParseJson(*request.body,
                                   fmt::format("repository {} request body", what)));
  if (!doc.IsObject()) {
    return Status::InvalidArgument(
        fmt::format("repository {} request body must be a JSON object", what));
  }
  auto given = doc.FindMember("parameters");
  if (given == doc.MemberEnd()) return parameters;
  if (!given->value.IsObject()) {
    return Status::InvalidArgument(
        fmt::format("repository {}: 'parameters' must be an object", what));
  }
  parameters.CopyFrom(given->value, parameters.GetAllocator());
  return parameters;
}

}  // namespace

// Body (optional): {"parameters": {...}}. On load, "config" is a config override: a JSON
// ModelConfig (as GET .../config writes it) used instead of config.pbtxt, and each
// "file:<path>" parameter a model file, base64 (Triton's; they need "config"): the model loads
// from those files (runtime/override_directory.h). Other parameters are ignored.
HttpResponse KServeRoutes::RepositoryControl(const HttpRequest& request, const std::string& model,
                                             bool load) const {
  const char* what = load ? "load" : "unload";
  std::shared_ptr<const config::ModelConfig> config_override;
  runtime::ModelFileOverrides files;
  bool unload_dependents = false;
  auto parameters = ControlParameters(request, what);
  if (!parameters.ok()) return Error(parameters.status());
  const rapidjson::Value& given = *parameters;
  for (const auto& p : given.GetObject()) {
    std::string_view key(p.name.GetString(), p.name.GetStringLength());
    if (load && key.substr(0, 5) == "file:") {
      if (!p.value.IsString()) {
        return Error(400, fmt::format(
                              "failed to load '{}': parameter '{}' must be a string holding "
                              "the file's bytes as base64",
                              model, key));
      }
      auto bytes = DecodeBase64(
          std::string_view(p.value.GetString(), p.value.GetStringLength()));
      if (!bytes.ok()) {
        return Error(bytes.status().WithContext(
            fmt::format("failed to load '{}': parameter '{}'", model, key)));
      }
      files.emplace_back(std::string(key.substr(5)), std::move(bytes).value());
    }
  }
  auto dependents = given.FindMember("unload_dependents");
  if (!load && dependents != given.MemberEnd()) {
    if (!dependents->value.IsBool()) {
      return Error(400, "repository unload: parameter 'unload_dependents' must be a boolean");
    }
    unload_dependents = dependents->value.GetBool();
  }
  auto config = given.FindMember("config");
  if (load && config != given.MemberEnd()) {
    if (!config->value.IsString()) {
      return Error(400, fmt::format("failed to load '{}': parameter 'config' must be a "
                                    "string holding the model configuration as JSON",
                                    model));
    }
    auto parsed = config::ModelConfigFromJson(
        std::string_view(config->value.GetString(), config->value.GetStringLength()));
    if (!parsed.ok()) {
      return Error(Status::InvalidArgument(fmt::format(
          "failed to load '{}': parameter 'config': {}", model, parsed.status().message())));
    }
    config_override = std::make_shared<const config::ModelConfig>(std::move(parsed).value());
  }
  if (mutable_manager_ == nullptr) {
    return Error(400, "explicit model load / unload is not allowed if polling is enabled");
  }
  Status status = load ? mutable_manager_->Load(model, std::move(config_override), files)
                       : mutable_manager_->Unload(model, unload_dependents);
  if (!status.ok()) return Error(status);
  return Empty(200);
}

// POST /v2/repository/models/{m}/sleep and /wake (docs/memory.md, "Sleeping models"). Body
// (optional): {"parameters": {"level": 1 or 2, "version": "3"}}: the sleep's level (1, the
// default: a host copy; 2: read again from the model's files on wake) and one version (all
// ready versions without it). A sleep waits up to kSleepWait for executions in flight.
HttpResponse KServeRoutes::RollbackControl(const HttpRequest& request, const std::string& model,
                                           std::string_view action) const {
  auto parameters = ControlParameters(request, std::string(action).c_str());
  if (!parameters.ok()) return Error(parameters.status());
  if (action != "rollback") {
    if (parameters->MemberCount() != 0) {
      return Error(400, fmt::format("repository {} takes no parameters", action));
    }
    Status held = mutable_manager_->Hold(model, action == "hold");
    return held.ok() ? Empty(200) : Error(held);
  }
  std::string reason = "asked for over the repository API";
  for (const auto& m : parameters->GetObject()) {
    const std::string_view name(m.name.GetString(), m.name.GetStringLength());
    if (name != "reason" || !m.value.IsString()) {
      return Error(400, "repository rollback takes one parameter, 'reason', a string");
    }
    reason = std::string(m.value.GetString(), m.value.GetStringLength());
  }
  Status rolled = mutable_manager_->Rollback(model, "manual", std::move(reason));
  return rolled.ok() ? Empty(200) : Error(rolled);
}

HttpResponse KServeRoutes::AlertWebhook(const HttpRequest& request) const {
  auto parsed = ParseJson(request.body ? *request.body : std::string(), "Alertmanager payload");
  if (!parsed.ok()) return Error(parsed.status());
  const rapidjson::Document& doc = *parsed;
  auto alerts = doc.IsObject() ? doc.FindMember("alerts") : doc.MemberEnd();
  if (!doc.IsObject() || alerts == doc.MemberEnd() || !alerts->value.IsArray()) {
    return Error(400, "Alertmanager payload: expected an object with an 'alerts' array "
                      "(Alertmanager's webhook_config format)");
  }
  auto text = [](const rapidjson::Value& object, const char* key) -> std::string {
    if (!object.IsObject()) return {};
    auto it = object.FindMember(key);
    return it != object.MemberEnd() && it->value.IsString()
               ? std::string(it->value.GetString(), it->value.GetStringLength())
               : std::string();
  };
  rapidjson::StringBuffer sb;
  JsonWriter w(sb);
  w.StartObject();
  w.Key("rolled_back");
  w.StartArray();
  std::vector<std::pair<std::string, std::string>> skipped;
  for (const auto& alert : alerts->value.GetArray()) {
    if (!alert.IsObject()) continue;
    auto labels = alert.FindMember("labels");
    const rapidjson::Value* label_object =
        labels != alert.MemberEnd() ? &labels->value : nullptr;
    const std::string model = label_object ? text(*label_object, "model") : std::string();
    const std::string name = label_object ? text(*label_object, "alertname") : std::string();
    if (text(alert, "status") != "firing") continue;  // resolved: nothing to do
    if (model.empty()) {
      skipped.emplace_back(name, "the alert has no 'model' label");
      continue;
    }
    auto annotations = alert.FindMember("annotations");
    std::string summary =
        annotations != alert.MemberEnd() ? text(annotations->value, "summary") : std::string();
    std::string figures = fmt::format("alert '{}'{}{}", name.empty() ? "(unnamed)" : name,
                                      summary.empty() ? "" : ": ", summary);
    Status rolled = mutable_manager_->Rollback(model, "webhook", std::move(figures));
    if (rolled.ok()) {
      WriteJsonString(w, model);
    } else {
      skipped.emplace_back(model, rolled.message());
    }
  }
  w.EndArray();
  w.Key("skipped");
  w.StartArray();
  for (const auto& [who, why] : skipped) {
    w.StartObject();
    w.Key("model");
    WriteJsonString(w, who);
    w.Key("reason");
    WriteJsonString(w, why);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Json(200, sb.GetString());
}

HttpResponse KServeRoutes::SleepControl(const HttpRequest& request, const std::string& model,
                                        bool sleep) const {
  const char* what = sleep ? "sleep" : "wake";
  backends::SleepLevel level = backends::SleepLevel::kHostCopy;
  int64_t version = 0;
  auto parameters = ControlParameters(request, what);
  if (!parameters.ok()) return Error(parameters.status());
  const rapidjson::Value& given = *parameters;
  auto given_level = given.FindMember("level");
  if (given_level != given.MemberEnd()) {
    if (!sleep) return Error(400, "repository wake: parameter 'level' is for sleep only");
    const auto& v = given_level->value;
    const bool one = (v.IsInt64() && v.GetInt64() == 1) || (v.IsString() && v == "1");
    const bool two = (v.IsInt64() && v.GetInt64() == 2) || (v.IsString() && v == "2");
    if (!one && !two) {
      return Error(400,
                   "repository sleep: parameter 'level' must be 1 (keep a host copy) or 2 "
                   "(read the model's files again on wake)");
    }
    level = one ? backends::SleepLevel::kHostCopy : backends::SleepLevel::kDiscard;
  }
  auto given_version = given.FindMember("version");
  if (given_version != given.MemberEnd()) {
    const auto& v = given_version->value;
    Result<int64_t> parsed_version = Status::InvalidArgument("not a version");
    if (v.IsString()) {
      parsed_version = ParseVersion(std::string_view(v.GetString(), v.GetStringLength()));
    } else if (v.IsInt64() && v.GetInt64() > 0) {
      parsed_version = v.GetInt64();
    }
    if (!parsed_version.ok()) {
      return Error(400, fmt::format("repository {}: parameter 'version' must be a positive "
                                    "version number",
                                    what));
    }
    version = *parsed_version;
  }
  Status status = sleep ? manager_->Sleep(model, version, level, kSleepWait)
                        : manager_->Wake(model, version);
  if (!status.ok()) return Error(status);
  return Empty(200);
}

}  // namespace vramd::http
