// vramd: the inference server's command line. `vramd serve` takes Triton's flag names where
// the meaning is the same.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <malloc.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "backends/backend.h"
#include "backends/backend_config.h"
#include "cli/stop_signals.h"
#include "cli/triton_flags.h"
#include "core/crash_report.h"
#include "core/log_format.h"
#include "memory/admission.h"
#include "memory/allocator.h"
#include "memory/byte_size.h"
#include "memory/cuda_devices.h"
#include "memory/growth_detector.h"
#include "memory/ledger.h"
#include "memory/memory_report.h"
#include "memory/nvml.h"
#include "memory/quota.h"
#include "memory/unattributed_alarm.h"
#include "runtime/custom_metrics.h"
#include "runtime/model_manager.h"
#include "runtime/reload_policy.h"
#include "server/access/restricted_apis.h"
#include "server/headers/header_forwarding.h"
#include "server/drain/drain.h"
#include "server/grpc/grpc_routes.h"
#include "server/trace/tracer.h"
#include "server/grpc/grpc_server.h"
#include "server/http/http_server.h"
#include "server/shared_memory/shared_memory_regions.h"
#include "server/http/kserve_routes.h"
#include "server/http/metrics_routes.h"

namespace {

struct ServeOptions {
  std::vector<std::string> repositories;
  std::string http_address = "0.0.0.0";
  int http_port = 8000;
  int http_threads = 0;
  int64_t http_max_input_size = int64_t{64} << 20;
  int http_max_connections = 10000;
  int http_idle_timeout_secs = 0;
  int http_header_timeout_secs = 30;
  int http_body_timeout_secs = 30;
  int64_t http_body_memory_mib = 1024;
  bool allow_grpc = true;
  bool grpc_shared_memory = true;
  bool http_shared_memory = true;
  std::string grpc_address = "0.0.0.0";
  int grpc_port = 8001;
  int grpc_threads = 0;
  vramd::grpc_server::GrpcServer::Options grpc;  // keepalive settings
  int log_verbose = 0;
  vramd::cli::TritonFlags triton;  // tritonserver's flags (cli/triton_flags.h)
  bool exit_on_error = false;
  bool strict_readiness = true;
  bool disable_auto_complete_config = false;
  bool memory_trace = false;
  bool allow_metrics = true;
  std::string metrics_address;  // empty: the HTTP address
  int metrics_port = 8002;
  int memory_growth_requests = 16;
  std::string memory_budget;  // --memory-budget, memory/quota.h's form; empty: none
  std::string memory_unattributed_alarm = "64MiB";  // a byte size; "0": off
  // Where rollback rules read GPU utilization: "" NVML (the busiest GPU), else a file holding a
  // percentage (a test's or an external monitor's figure).
  std::string rollback_gpu_utilization_file;
  std::string device_pool = "caching";  // --device-pool: memory::ParseDevicePool's form
  bool memory_admission = true;
  bool memory_admission_device_free = false;  // GPUs without a budget: against free memory
  int64_t memory_admission_wait_ms = 30000;
  int exit_timeout_secs = 30;
  std::string model_control_mode = "none";
  std::vector<std::string> load_models;  // explicit mode: loaded at start-up ("*": all)
  int repository_poll_secs = 15;
  int model_load_thread_count = 4;
  int64_t reload_headroom_mib = 256;
  int64_t reload_unavailable_wait_ms = 5000;
  std::string backend_directory{vramd::backends::kDefaultBackendDirectory};
  std::vector<std::string> backend_configs;  // --backend-config values, in order
};

// Request bodies and encoded responses are host buffers of the request's size, made and freed
// once per request. With glibc's defaults a 150 KB one is mapped or grown into a heap top that
// is trimmed again at its free, so every request page-faults its buffers in afresh (a quarter
// of the server's CPU time for 150 KB tensors at concurrency 1). Keeping freed memory up to
// these sizes in malloc's heaps makes the next request reuse it: 150 KB identity requests went
// from ~2,800 to ~3,800-4,000 per second (bench/identity_roundtrip.sh, docs/benchmarks.md).
// The cost: the process keeps the host memory of its busiest moment. A user's own
// GLIBC_TUNABLES / MALLOC_*_ settings win, and VRAMD_KEEP_MALLOC_DEFAULTS=1 keeps glibc's.
void TuneMalloc() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const char* keep = std::getenv("VRAMD_KEEP_MALLOC_DEFAULTS");
  if ((tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      (keep != nullptr && std::strcmp(keep, "1") == 0)) {
    return;
  }
  constexpr int kMmapThreshold = 32 << 20;   // below this, from the heaps, not mmap
  constexpr int kTrimThreshold = 256 << 20;  // free memory a heap keeps at its top
  if (mallopt(M_MMAP_THRESHOLD, kMmapThreshold) != 1 ||
      mallopt(M_TRIM_THRESHOLD, kTrimThreshold) != 1) {
    spdlog::warn("could not set malloc's thresholds; request buffers are page-faulted afresh");
  }
}

// A boolean as Triton's take one: --NAME alone, --NAME=VALUE and --NAME VALUE (true, false,
// 1, 0, yes, no, on, off), and vramd's --no-NAME.
void AddSwitch(CLI::App* app, const std::string& name, bool* value, const std::string& help) {
  app->add_option("--" + name, *value,
                  fmt::format("{} (default {}; --{} alone means true)", help,
                              *value ? "true" : "false", name))
      ->expected(0, 1)
      ->default_str("true");
  app->add_flag("!--no-" + name, *value, "As --" + name + "=false");
}

int Serve(const ServeOptions& options, vramd::cli::StopSignals& stop_signals) {
  // Logs go to stderr (or --log-file), keeping stdout free for anything a wrapper wants to print.
  const vramd::cli::TritonFlags& triton = options.triton;
  const vramd::logging::LogState log_startup{
      triton.log_file,   triton.log_format, triton.log_info, triton.log_warning,
      triton.log_error, static_cast<uint32_t>(std::max(options.log_verbose, 0))};
  auto log_sink = vramd::logging::StartServerLog(log_startup);
  if (!log_sink.ok()) {
    std::fprintf(stderr, "vramd: --log-file: %s\n", log_sink.status().message().c_str());
    return 1;
  }
  std::vector<std::string> flag_warnings;
  vramd::cli::CheckTritonFlags(triton, &flag_warnings);
  for (const std::string& w : flag_warnings) spdlog::warn("{}", w);
  // Access settings are checked before anything loads: a mistake in them stops the start.
  vramd::server::RestrictedApis http_restricted;
  vramd::server::RestrictedApis grpc_restricted;
  for (auto [flag, values, prefix, into] :
       {std::tuple{"--http-restricted-api", &triton.http_restricted_api, std::string_view(),
                   &http_restricted},
        std::tuple{"--grpc-restricted-protocol", &triton.grpc_restricted_protocol,
                   vramd::server::kGrpcRestrictionPrefix, &grpc_restricted}}) {
    for (const std::string& value : *values) {
      if (auto added = into->Add(flag, value, prefix); !added.ok()) {
        spdlog::error("{}", added.message());
        return 1;
      }
    }
  }
  std::optional<vramd::server::HeaderForwarding> http_forward;
  std::optional<vramd::server::HeaderForwarding> grpc_forward;
  for (auto [flag, pattern, into] :
       {std::tuple{"--http-header-forward-pattern", &triton.http_header_forward_pattern,
                   &http_forward},
        std::tuple{"--grpc-header-forward-pattern", &triton.grpc_header_forward_pattern,
                   &grpc_forward}}) {
    if (pattern->empty()) continue;
    auto compiled = vramd::server::HeaderForwarding::Compile(flag, *pattern);
    if (!compiled.ok()) {
      spdlog::error("{}", compiled.status().message());
      return 1;
    }
    into->emplace(std::move(compiled).value());
  }
  std::optional<vramd::grpc_server::GrpcServer::Options::Tls> grpc_tls;
  if (options.allow_grpc && triton.grpc_use_ssl) {
    auto tls = vramd::grpc_server::GrpcServer::LoadTls(
        {triton.grpc_server_cert, triton.grpc_server_key, triton.grpc_root_cert,
         triton.grpc_use_ssl_mutual});
    if (!tls.ok()) {
      spdlog::error("{}", tls.status().message());
      return 1;
    }
    grpc_tls = std::move(tls).value();
  }
  // cuBLAS keeps a default workspace pool per handle (64 MiB on Hopper) outside the ledger.
  // vramd's handles always run in a workspace taken from the ledger, so the pool is disabled
  // unless the user set it.
  setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", /*overwrite=*/0);
  TuneMalloc();

  spdlog::info("vramd {} starting; {}", VRAMD_VERSION, vramd::memory::CudaDescription());

  // The memory system outlives everything that allocates: it is declared before the models.
  vramd::memory::Ledger::Options ledger_options{.trace = options.memory_trace};
  if (!options.memory_budget.empty()) {
    auto budget = vramd::memory::ParseMemoryQuota(options.memory_budget);
    if (!budget.ok()) {
      spdlog::error("--memory-budget: {}", budget.status().message());
      return 1;
    }
    ledger_options.budget = std::move(budget).value();
    spdlog::info("memory budget: {}", vramd::memory::FormatMemoryQuota(ledger_options.budget));
  }
  vramd::memory::Ledger ledger(ledger_options);
  // The manager, once it exists, hears of leaks too (its rollback rules); null before it is
  // made and again before it is destroyed (LeakListener below).
  std::atomic<vramd::runtime::ModelManager*> leak_listener{nullptr};
  ledger.SetLeakCallback([&leak_listener](const vramd::memory::LeakReport& leak) {
    if (auto* manager = leak_listener.load()) manager->NoteLeak(leak.owner_path, leak.bytes);
    spdlog::warn("memory leak: {} closed holding {} bytes in {} allocation(s){}", leak.owner_path,
                 leak.bytes, leak.count,
                 leak.allocations.empty() || leak.allocations[0].backtrace.empty()
                     ? ""
                     : fmt::format("; largest allocated at {}",
                                   fmt::join(leak.allocations[0].backtrace, " <- ")));
  });
  vramd::memory::Allocator allocator(&ledger);
  {
    auto pool = vramd::memory::ParseDevicePool(options.device_pool);
    if (!pool.ok()) {
      spdlog::error("--device-pool: {}", pool.status().message());
      return 1;
    }
    allocator.SetDevicePool(*pool);
    if (*pool != vramd::memory::DevicePool::kCaching) {
      spdlog::info("device pools: {} (CUDA virtual memory management)",
                   vramd::memory::DevicePoolName(*pool));
    }
  }
  // Executions wait for memory only where there is a budget to wait against.
  std::optional<vramd::memory::Admission> admission;
  // Without a budget, a GPU is admitted against what it has free when asked to
  // (--memory-admission-device-free): the driver's free memory and its pool's cached free.
  vramd::memory::Admission::DeviceFree device_free;
  if (options.memory_admission_device_free) {
    device_free = [&allocator](vramd::memory::Device device) -> std::optional<int64_t> {
      auto free = vramd::runtime::DeviceFreeBytes(device, &allocator);
      if (!free.ok()) return std::nullopt;
      return *free;
    };
  }
  if (options.memory_admission && (!ledger_options.budget.empty() || device_free)) {
    admission.emplace(&ledger, &allocator, std::move(device_free));
  }
  std::optional<vramd::memory::GrowthDetector> growth;
  if (options.memory_growth_requests > 0) growth.emplace(options.memory_growth_requests);

  // NVML is optional: without it (no driver, no GPU) the report says why and all else works.
  auto nvml = vramd::memory::Nvml::Load();
  if (!nvml.ok()) spdlog::info("memory report without NVML: {}", nvml.status().message());
  const vramd::memory::Nvml* nvml_ptr = nvml.ok() ? nvml->get() : nullptr;
  // A GPU gets a CUDA context when something first uses it, not at start-up, and its baseline
  // is measured then: GPUs no model uses cost this server nothing.
  vramd::memory::DeviceContexts device_contexts(vramd::memory::DeviceContexts::ForThisProcess(
      nvml_ptr, nvml.ok() ? std::string() : nvml.status().message()));
  allocator.SetDeviceContexts(&device_contexts);
  struct DeviceContextsReset {
    vramd::memory::Allocator* allocator;
    ~DeviceContextsReset() { allocator->SetDeviceContexts(nullptr); }
  } device_contexts_reset{&allocator};
  vramd::memory::MemoryReportOptions report_options;
  report_options.pid = static_cast<uint32_t>(getpid());
  if (!nvml.ok()) report_options.nvml_unavailable_reason = nvml.status().message();
  // What GPU instances' libraries take outside the pools, charged to them (native_memory.h).
  vramd::memory::NativeMemoryMeter native_meter(&ledger, &allocator, nvml_ptr,
                                                static_cast<uint32_t>(getpid()));
  report_options.native = &native_meter;
  // Stub and process-per-instance hosts, shown per PID under the models they serve.
  report_options.hosted = &vramd::memory::HostedProcesses::Global();
  report_options.admission = admission ? &*admission : nullptr;
  auto alarm_threshold = vramd::memory::ParseByteSize(options.memory_unattributed_alarm);
  if (!alarm_threshold.ok()) {
    spdlog::error("--memory-unattributed-alarm: {}", alarm_threshold.status().message());
    return 1;
  }
  vramd::memory::UnattributedAlarm unattributed_alarm(*alarm_threshold);
  report_options.unattributed_alarm = &unattributed_alarm;
  vramd::memory::LiveMemoryReportSource memory_report(
      &ledger, &allocator, nvml_ptr, &device_contexts, report_options);
  // A GPU's out-of-memory message ends with NVML's view of it: free memory, and what of the
  // process's use is outside the pools. Taken back before memory_report goes (the manager, whose
  // models allocate, is declared below and gone by then).
  allocator.SetDeviceNote([&memory_report](vramd::memory::Device device) {
    return device.is_cuda() ? vramd::memory::DeviceMemoryNote(memory_report.Build(), device)
                            : std::string();
  });
  struct DeviceNoteReset {
    vramd::memory::Allocator* allocator;
    ~DeviceNoteReset() { allocator->SetDeviceNote(nullptr); }
  } device_note_reset{&allocator};

  // Backends that are not built in load from here; set before the manager loads any model.
  vramd::backends::SetBackendDirectory(options.backend_directory);
  // Triton's --backend-config settings (backends/backend_config.h), also before any load.
  std::vector<vramd::backends::BackendSetting> backend_settings;
  for (const std::string& arg : options.backend_configs) {
    auto setting = vramd::backends::ParseBackendSetting(arg);
    if (!setting.ok()) {
      spdlog::error("{}", setting.status().message());
      return 1;
    }
    backend_settings.push_back(std::move(setting).value());
  }
  vramd::backends::SetBackendSettings(std::move(backend_settings));

  // The tracer: before the manager, so it outlives every request and load it records.
  auto tracer_options = vramd::trace::TracerOptions::FromFlags(triton.trace_config);
  if (!tracer_options.ok()) {
    spdlog::error("{}", tracer_options.status().message());
    return 1;
  }
  vramd::trace::Tracer tracer(std::move(tracer_options).value());

  // Models' custom metrics: declared before the manager, so it outlives every model.
  vramd::runtime::CustomMetricsRegistry custom_metrics;
  vramd::runtime::ModelManager::Options manager_options;
  manager_options.custom_metrics = &custom_metrics;
  for (const auto& r : options.repositories) manager_options.repositories.emplace_back(r);
  manager_options.exit_on_error = options.exit_on_error;
  manager_options.memory = {&ledger, &allocator, growth ? &*growth : nullptr, nvml_ptr,
                            &native_meter, &device_contexts};
  // Each load and unload ends with a look at memory: the unattributed alarm sees its figure.
  manager_options.memory_settled = [&memory_report] { (void)memory_report.Build(); };
  manager_options.load_finished = [&tracer](const std::string& model,
                                            const vramd::runtime::LoadReport& report) {
    tracer.LoadFinished(model, report);
  };
  manager_options.child_tracer = &tracer;
  manager_options.rolled_back = [&tracer](const vramd::runtime::RollbackRecord& record) {
    tracer.RolledBack(record);
  };
  manager_options.gpu_utilization = [nvml_ptr, file = options.rollback_gpu_utilization_file]()
      -> std::optional<double> {
    if (!file.empty()) {
      std::ifstream in(file);
      double percent = -1;
      if (!(in >> percent) || percent < 0 || percent > 100) return std::nullopt;
      return percent / 100;
    }
    if (nvml_ptr == nullptr) return std::nullopt;
    std::optional<double> busiest;
    for (int d = 0; d < nvml_ptr->DeviceCount(); ++d) {
      auto u = nvml_ptr->Utilization(d);
      if (u.ok()) busiest = std::max(busiest.value_or(0.0), u->gpu_percent / 100.0);
    }
    return busiest;
  };
  if (admission) {
    manager_options.memory.admission = &*admission;
    manager_options.memory.admission_wait =
        std::chrono::milliseconds(options.memory_admission_wait_ms);
  }
  manager_options.model_control_mode =
      options.model_control_mode == "explicit" ? vramd::runtime::ModelControlMode::kExplicit
      : options.model_control_mode == "poll"   ? vramd::runtime::ModelControlMode::kPoll
                                               : vramd::runtime::ModelControlMode::kNone;
  manager_options.startup_models = options.load_models;
  manager_options.poll_interval = std::chrono::seconds(options.repository_poll_secs);
  manager_options.load_thread_count = options.model_load_thread_count;
  manager_options.auto_complete_config = !options.disable_auto_complete_config;
  manager_options.reload.headroom_bytes = options.reload_headroom_mib << 20;
  manager_options.reload.unavailable_wait =
      std::chrono::milliseconds(options.reload_unavailable_wait_ms);
  if (!options.load_models.empty() && options.model_control_mode != "explicit") {
    spdlog::warn("--load-model is ignored unless --model-control-mode is explicit");
  }
  auto manager = vramd::runtime::ModelManager::Create(manager_options);
  if (!manager.ok()) {
    spdlog::error("{}", manager.status().message());
    return 1;
  }
  leak_listener.store(manager->get());
  struct LeakListenerReset {
    std::atomic<vramd::runtime::ModelManager*>* listener;
    ~LeakListenerReset() { listener->store(nullptr); }
  } leak_listener_reset{&leak_listener};  // destroyed before the manager

  // Client shared-memory regions: registered over either protocol, read and written by the
  // requests of either.
  vramd::shared_memory::SharedMemoryRegions shared_memory_regions(&ledger, &device_contexts);
  const std::string server_name = triton.id.empty() ? "vramd" : triton.id;
  vramd::logging::LogSettings log_settings(log_startup, *log_sink);
  vramd::server::Drain drain;
  vramd::http::KServeRoutes routes(manager->get(), &memory_report,
                                   {server_name, VRAMD_VERSION, options.strict_readiness,
                                    options.http_shared_memory ? &shared_memory_regions : nullptr,
                                    &log_settings, &drain, &tracer,
                                    http_restricted.empty() ? nullptr : &http_restricted,
                                    http_forward ? &*http_forward : nullptr});
  vramd::http::HttpServer::Options http_options;
  http_options.address = options.http_address;
  http_options.port = static_cast<uint16_t>(options.http_port);
  http_options.threads = options.http_threads;
  http_options.max_body_bytes = static_cast<size_t>(options.http_max_input_size);
  http_options.drain_timeout = std::chrono::seconds(options.exit_timeout_secs);
  http_options.max_connections = static_cast<size_t>(options.http_max_connections);
  http_options.idle_timeout = std::chrono::seconds(options.http_idle_timeout_secs);
  http_options.header_timeout = std::chrono::seconds(options.http_header_timeout_secs);
  http_options.body_timeout = std::chrono::seconds(options.http_body_timeout_secs);
  http_options.max_body_memory_bytes = static_cast<size_t>(options.http_body_memory_mib) << 20;
  if (!http_restricted.empty() || http_forward.has_value()) {
    http_options.pass_header = [&routes](std::string_view name) {
      return routes.ReadsHeader(name);
    };
  }

  std::unique_ptr<vramd::http::HttpServer> metrics_server;
  if (options.allow_metrics) {
    vramd::http::HttpServer::Options metrics_options;
    metrics_options.address =
        options.metrics_address.empty() ? options.http_address : options.metrics_address;
    metrics_options.port = static_cast<uint16_t>(options.metrics_port);
    metrics_options.threads = 1;
    metrics_options.max_body_bytes = 64 << 10;
    metrics_options.max_connections = http_options.max_connections;
    metrics_options.idle_timeout = http_options.idle_timeout;
    metrics_options.header_timeout = http_options.header_timeout;
    metrics_options.body_timeout = http_options.body_timeout;
    metrics_options.max_body_memory_bytes = metrics_options.max_body_bytes * 64;
    auto started = vramd::http::HttpServer::Start(
        metrics_options,
        [&memory_report, &manager](vramd::http::HttpRequest request,
                                   vramd::http::Responder respond) {
          std::string_view path(request.target);
          path = path.substr(0, path.find('?'));
          if (request.method == "GET" && path == "/metrics") {
            return respond(vramd::http::MetricsResponse(memory_report, manager->get()));
          }
          vramd::http::HttpResponse not_found;
          not_found.status = 404;
          not_found.body = R"({"error":"the metrics port serves GET /metrics"})";
          respond(std::move(not_found));
        });
    if (!started.ok()) {
      spdlog::error("{}", started.status().message());
      return 1;
    }
    metrics_server = std::move(started).value();
    spdlog::info("metrics listening on {}:{}", metrics_options.address, metrics_server->port());
  }

  // The metrics and gRPC servers start before HTTP, whose readiness is what clients and
  // tests wait for: once HTTP answers, every port is open and logged. gRPC makes its pollers
  // (file descriptors) at start, and the library aborts if it cannot, so nothing a client
  // does over HTTP, such as using up the descriptors, may come first. All reach the same
  // manager; gRPC shuts down first.
  std::unique_ptr<vramd::grpc_server::GrpcRoutes> grpc_routes;
  std::unique_ptr<vramd::grpc_server::GrpcServer> grpc_server;
  if (options.allow_grpc) {
    grpc_routes = std::make_unique<vramd::grpc_server::GrpcRoutes>(
        manager->get(),
        vramd::grpc_server::GrpcRoutes::ServerInfo{server_name, VRAMD_VERSION,
                                                   options.strict_readiness, &log_settings,
                                                   &drain, &tracer},
        options.grpc_shared_memory ? &shared_memory_regions : nullptr);
    vramd::grpc_server::GrpcServer::Options grpc_options = options.grpc;
    grpc_options.address = options.grpc_address;
    grpc_options.port = static_cast<uint16_t>(options.grpc_port);
    grpc_options.threads = options.grpc_threads;
    grpc_options.drain_timeout = std::chrono::seconds(options.exit_timeout_secs);
    grpc_options.tls = grpc_tls;
    if (!grpc_restricted.empty()) grpc_options.restricted = &grpc_restricted;
    if (grpc_forward.has_value()) grpc_options.forward_headers = &*grpc_forward;
    // Transport tuning to measure (docs/grpc.md), not a flag: Triton has none for it.
    if (const char* tuning = std::getenv("VRAMD_GRPC_CHANNEL_ARGS")) {
      auto args = vramd::grpc_server::GrpcServer::ParseChannelArgs(tuning);
      if (!args.ok()) {
        spdlog::error("VRAMD_GRPC_CHANNEL_ARGS: {}", args.status().message());
        if (metrics_server) metrics_server->Shutdown();
        return 1;
      }
      grpc_options.channel_args = std::move(args).value();
    }
    auto started = vramd::grpc_server::GrpcServer::Start(grpc_options, grpc_routes.get());
    if (!started.ok()) {
      spdlog::error("{}", started.status().message());
      if (metrics_server) metrics_server->Shutdown();
      return 1;
    }
    grpc_server = std::move(started).value();
    spdlog::info("gRPC listening on {}:{}", options.grpc_address, grpc_server->port());
    if (grpc_tls.has_value()) {
      spdlog::info("gRPC serves TLS{}", grpc_tls->mutual ? ", and requires client certificates"
                                                         : "");
    }
    if (!grpc_restricted.empty()) {
      spdlog::info("gRPC restricted protocols: {}", grpc_restricted.Summary());
    }
  }

  std::unique_ptr<vramd::http::HttpServer> http_server;
  if (triton.allow_http) {
    auto started = vramd::http::HttpServer::Start(
        http_options, [&routes](vramd::http::HttpRequest request, vramd::http::Responder respond) {
          routes.Handle(std::move(request), std::move(respond));
        });
    if (!started.ok()) {
      spdlog::error("{}", started.status().message());
      if (grpc_server) grpc_server->Shutdown();
      if (metrics_server) metrics_server->Shutdown();
      return 1;
    }
    http_server = std::move(started).value();
    spdlog::info("HTTP listening on {}:{}", options.http_address, http_server->port());
    if (!http_restricted.empty()) {
      spdlog::info("HTTP restricted APIs: {}", http_restricted.Summary());
    }
  } else {
    spdlog::info("HTTP off (--allow-http=false)");
  }

  int sig = stop_signals.Wait();
  drain.Begin();  // readiness fails from here, for a probe that comes while requests finish
  spdlog::info("received {}: finishing in-flight requests, then exiting",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
  if (grpc_server) grpc_server->Shutdown();
  if (http_server) http_server->Shutdown();
  if (metrics_server) metrics_server->Shutdown();
  spdlog::info("vramd stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  vramd::InstallCrashReport("vramd");
  // From here on no SIGINT/SIGTERM can kill the process, whichever thread takes it.
  vramd::cli::StopSignals stop_signals;
  CLI::App app{"vramd: an inference server for Triton model repositories that accounts for "
               "every byte of GPU memory"};
  // tritonserver has no subcommand: without one, the arguments are serve's.
  app.require_subcommand(1);

  ServeOptions options;
  CLI::App* serve = app.add_subcommand("serve", "Serve the models of one or more repositories");
  serve->add_option("--model-repository,--model-store", options.repositories,
                    "A Triton-style model repository folder; repeat for several "
                    "(--model-store: Triton's other name)")
      ->required()
      ->check(CLI::ExistingDirectory);
  serve->add_option("--http-address", options.http_address, "Address to listen on for HTTP")
      ->capture_default_str();
  serve->add_option("--http-port", options.http_port, "HTTP port; 0 picks a free one")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  serve->add_option("--http-thread-count", options.http_threads,
                    "HTTP server threads; 0 means one per hardware thread")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--http-max-input-size", options.http_max_input_size,
                    "Largest request body in bytes; larger ones are answered 413")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve->add_option("--http-max-connections", options.http_max_connections,
                    "Most HTTP connections open at once; one more is answered 503 and closed")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve->add_option("--http-idle-timeout-secs", options.http_idle_timeout_secs,
                    "Close a keep-alive connection that sends no request for this long "
                    "(0 = never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--http-header-timeout-secs", options.http_header_timeout_secs,
                    "A request header must be complete this long after its first byte (408)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve->add_option("--http-body-timeout-secs", options.http_body_timeout_secs,
                    "Longest pause while a request body is read (408)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve->add_option("--http-body-memory-mib", options.http_body_memory_mib,
                    "Request bodies being read or answered hold at most this much memory "
                    "together; a request that would pass it is answered 503")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  AddSwitch(serve, "allow-grpc", &options.allow_grpc,
            "Serve Triton's gRPC protocol (inference.GRPCInferenceService)");
  serve->add_flag("--http-shared-memory,!--no-http-shared-memory", options.http_shared_memory,
                  "Serve Triton's system shared-memory extension over HTTP "
                  "(/v2/systemsharedmemory/...; tensors in registered regions)")
      ->capture_default_str();
  serve->add_flag("--grpc-shared-memory,!--no-grpc-shared-memory", options.grpc_shared_memory,
                  "Serve Triton's system shared-memory extension over gRPC (register, status, "
                  "unregister; tensors in registered regions)")
      ->capture_default_str();
  serve->add_option("--grpc-address", options.grpc_address, "Address to listen on for gRPC")
      ->capture_default_str();
  serve->add_option("--grpc-port", options.grpc_port, "gRPC port; 0 picks a free one")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  serve->add_option("--grpc-infer-thread-count", options.grpc_threads,
                    "gRPC completion-queue threads; 0 means one per hardware thread")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option_function<std::string>(
      "--grpc-infer-response-compression-level",
      [&options](const std::string& level) {
        auto parsed = vramd::grpc_server::GrpcServer::ParseCompressionLevel(level);
        if (!parsed.ok()) throw CLI::ValidationError(std::string(parsed.status().message()));
        options.grpc.infer_compression_level = *parsed;
      },
      "none, low, medium or high: compress ModelInfer and ModelStreamInfer answers at this "
      "level for clients that accept it (default none)");
  serve->add_option("--grpc-keepalive-time", options.grpc.keepalive_time_ms,
                    "gRPC keepalive ping interval in ms (GRPC_ARG_KEEPALIVE_TIME_MS)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve->add_option("--grpc-keepalive-timeout", options.grpc.keepalive_timeout_ms,
                    "How long to wait for a keepalive ping's answer, in ms")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve->add_option("--grpc-keepalive-permit-without-calls",
                    options.grpc.keepalive_permit_without_calls,
                    "Allow keepalive pings on a connection with no call in flight")
      ->capture_default_str();
  serve->add_option("--grpc-http2-max-pings-without-data", options.grpc.http2_max_pings_without_data,
                    "Pings sent without data before a frame with data must come (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--grpc-http2-min-recv-ping-interval-without-data",
                    options.grpc.http2_min_recv_ping_interval_without_data_ms,
                    "Shortest interval between a client's pings with no data, in ms")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--grpc-http2-max-ping-strikes", options.grpc.http2_max_ping_strikes,
                    "Bad pings tolerated before the connection is closed (0: any number)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--grpc-max-connection-age", options.grpc.max_connection_age_ms,
                    "Close a gRPC connection this many ms after it opened (GOAWAY: calls in "
                    "flight finish, clients reconnect); 0: never")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--grpc-max-connection-age-grace", options.grpc.max_connection_age_grace_ms,
                    "After --grpc-max-connection-age, cut calls still in flight after this many "
                    "ms; 0: wait for them")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--log-verbose", options.log_verbose, "Verbose logging level (0 = off)")
      ->capture_default_str();
  AddSwitch(serve, "exit-on-error", &options.exit_on_error,
            "Exit if any model fails to load (default: serve the others)");
  AddSwitch(serve, "strict-readiness", &options.strict_readiness,
            "/v2/health/ready needs every model ready (default); else only a live server");
  serve->add_flag("--disable-auto-complete-config", options.disable_auto_complete_config,
                  "Take config.pbtxt as written: no backend auto-completes it (Triton's flag)");
  AddSwitch(serve, "allow-metrics", &options.allow_metrics,
            "Serve Prometheus metrics on the metrics port");
  serve->add_option("--metrics-address", options.metrics_address,
                    "Address for metrics (default: the HTTP address)");
  serve->add_option("--metrics-port", options.metrics_port, "Port for GET /metrics; 0 picks one")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  serve->add_flag("--memory-trace", options.memory_trace,
                  "Record a native backtrace with every allocation, shown in leak reports");
  serve->add_option("--memory-budget", options.memory_budget,
                    "What the server may hold per device, all models together: a size for each "
                    "GPU (\"100GiB\") or DEVICE=SIZE,... (\"cuda:0=100GiB,cpu=64GiB\"); an "
                    "allocation past it fails as a full device would");
  serve->add_option("--rollback-gpu-utilization-file", options.rollback_gpu_utilization_file,
                    "Rollback rules read GPU utilization from this file (a percentage) instead "
                    "of NVML (docs/rollback.md)");
  serve->add_option("--memory-unattributed-alarm", options.memory_unattributed_alarm,
                    "Warn, and set vramd_memory_unattributed_alarm, when a GPU's unattributed "
                    "memory passes this size either way (\"0\" = off; docs/memory.md)")
      ->capture_default_str();
  serve->add_option("--device-pool", options.device_pool,
                    "How GPU pools get memory: \"caching\" (cudaMalloc segments) or \"vmm\" "
                    "(CUDA virtual memory: free granules go back to the driver, so memory free in "
                    "pieces serves one large allocation; docs/memory.md, \"The VMM pool\")")
      ->capture_default_str();
  serve->add_option("--memory-admission", options.memory_admission,
                    "On a device with a --memory-budget, start an execution only when what it "
                    "is predicted to make fits, else wait (docs/memory.md, \"Admission\")")
      ->capture_default_str();
  serve->add_option("--memory-admission-device-free", options.memory_admission_device_free,
                    "On a GPU without a --memory-budget, admit executions against what the "
                    "device has free (the driver's free memory plus the pool's cached free)")
      ->capture_default_str();
  serve->add_option("--memory-admission-wait-ms", options.memory_admission_wait_ms,
                    "The longest an execution waits for memory when its requests have no "
                    "earlier deadline")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve->add_option("--memory-growth-requests", options.memory_growth_requests,
                    "Flag an instance whose live memory rises over this many consecutive "
                    "requests (0 = off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--exit-timeout-secs", options.exit_timeout_secs,
                    "On SIGINT/SIGTERM, how long in-flight requests may take to finish")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--model-control-mode", options.model_control_mode,
                    "none: load every model at start-up, refuse load/unload requests; "
                    "poll: load every model, then follow the repositories' changes; "
                    "explicit: load the --load-model models, then load/unload on request")
      ->check(CLI::IsMember({"none", "poll", "explicit"}))
      ->capture_default_str();
  serve->add_option("--repository-poll-secs", options.repository_poll_secs,
                    "Poll mode: seconds between scans; a change is acted on once two scans "
                    "agree (docs/model-control.md)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve->add_option("--model-load-thread-count", options.model_load_thread_count,
                    "Models that may load at the same time")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  serve->add_option("--reload-headroom-mib", options.reload_headroom_mib,
                    "A reload keeps the old versions serving only if the new ones' predicted "
                    "footprint plus this much fits in free memory")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--reload-unavailable-wait-ms", options.reload_unavailable_wait_ms,
                    "During a resource-preserving reload, how long a request waits for the "
                    "model before an unavailable error")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  serve->add_option("--backend-directory", options.backend_directory,
                    "Where backends that are not built in are found: "
                    "<dir>/<name>/libvramd_<name>.so (docs/backends.md)")
      ->capture_default_str();
  serve->add_option("--backend-config", options.backend_configs,
                    "<backend>,<setting>=<value>, or <setting>=<value> for every backend "
                    "(Triton's flag); repeat for several. vramd reads default-hosting="
                    "in_process|stub|process_per_instance and stub-call-timeout-ms=<ms> "
                    "(docs/remote-backends.md) and logs any other setting as ignored");
  serve->add_option("--load-model", options.load_models,
                    "Explicit mode: a model to load at start-up; repeat for several, '*' for all");
  vramd::cli::AddTritonFlags(serve, &options.triton);

  std::vector<std::string> args = vramd::cli::WithServeSubcommand(argc, argv);
  std::vector<char*> arg_pointers;
  for (std::string& a : args) arg_pointers.push_back(a.data());
  CLI11_PARSE(app, static_cast<int>(arg_pointers.size()), arg_pointers.data());
  if (options.triton.strict_model_config) options.disable_auto_complete_config = true;
  if (serve->parsed()) return Serve(options, stop_signals);
  return 0;
}
