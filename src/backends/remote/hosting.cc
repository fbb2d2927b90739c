#include "backends/remote/hosting.h"

#include <fmt/format.h>

#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <map>
#include <system_error>
#include <utility>

#include "backends/abi/abi_bridge.h"
#include "backends/backend_config.h"
#include "backends/remote/execution_env.h"
#include "backends/remote/stub.h"
#include "config/model_config_json.h"

#ifndef VRAMD_BACKEND_HOST_DEFAULT
#define VRAMD_BACKEND_HOST_DEFAULT ""
#endif

namespace vramd::backends::remote {
namespace fs = std::filesystem;
namespace {

// What a hosted model's stubs and instances share; the last of them to go takes it.
struct RemoteShared {
  std::unique_ptr<abi::ServerApi> server;  // the table the hosts' calls are performed on
  std::unique_ptr<ExecutionEnv> env;
  StubOptions base;  // label and model filled per stub
  HostingMode mode = HostingMode::kStub;
  std::string model_label;  // "model 'm' version 1"
  bool library_takes_gpu_inputs = false;  // Backend::AcceptsGpuInputs of the library
  std::atomic<bool> gpu_instance{false};  // an instance on a GPU was created

  Mutex mu;
  // Stub mode: the stub of each device (-1: CPU instances). Stubs go before `server` and `env`.
  std::map<int, std::shared_ptr<Stub>> stubs GUARDED_BY(mu);
};

class RemoteInstance final : public BackendInstance {
 public:
  RemoteInstance(std::shared_ptr<RemoteShared> shared, std::shared_ptr<Stub> stub, uint32_t slot)
      : shared_(std::move(shared)), stub_(std::move(stub)), slot_(slot) {}
  ~RemoteInstance() override { stub_->RemoveInstance(slot_); }

  Status Execute(const InferRequest& request, std::vector<Tensor>* outputs) override {
    return stub_->Execute(slot_, request, outputs);
  }
  Status ExecuteRequests(std::span<const ListedRequest> requests) override {
    return stub_->ExecuteRequests(slot_, requests);
  }
  // Asked only for a library that checks readiness (HostingBackend::ChecksReadiness); a stub
  // restarting is not ready whatever the library would say.
  Status Ready() override { return stub_->Ready(slot_); }
  Status Available() const override { return stub_->Available(); }

 private:
  const std::shared_ptr<RemoteShared> shared_;  // declared first: goes after the stub
  const std::shared_ptr<Stub> stub_;
  const uint32_t slot_;
};

class RemoteModel final : public BackendModel {
 public:
  explicit RemoteModel(std::shared_ptr<RemoteShared> shared) : shared_(std::move(shared)) {}

  // GPU inputs cross to the host by CUDA IPC only for a model on a GPU, whose host has a
  // context there anyway; a CPU model's host gets them in host memory (opening them would cost
  // it a context).
  bool TakesGpuInputs() const override {
    return shared_->library_takes_gpu_inputs && shared_->gpu_instance.load();
  }
  ~RemoteModel() override {
    std::map<int, std::shared_ptr<Stub>> stubs;
    {
      MutexLock lock(shared_->mu);
      stubs.swap(shared_->stubs);
    }
  }

  Result<std::unique_ptr<BackendInstance>> CreateInstance(const InstanceContext& ctx) override {
    const bool gpu = ctx.kind == DeviceKind::kGpu;
    shared_->server->set_load_timing(ctx.timing);
    auto stub = StubFor(ctx, gpu);
    if (!stub.ok()) {
      shared_->server->set_load_timing(nullptr);
      return stub.status();
    }
    WireInstanceInfo info;
    info.name = ctx.name;
    info.index = ctx.index;
    info.kind = gpu ? VRAMD_DEVICE_GPU : VRAMD_DEVICE_CPU;
    info.device_id = gpu ? ctx.device_id : -1;
    info.owner = ctx.owner;
    auto slot = (*stub)->AddInstance(std::move(info));
    shared_->server->set_load_timing(nullptr);
    if (!slot.ok()) return slot.status();
    if (gpu) shared_->gpu_instance = true;
    return std::unique_ptr<BackendInstance>(std::make_unique<RemoteInstance>(shared_, *stub, *slot));
  }

 private:
  Result<std::shared_ptr<Stub>> StubFor(const InstanceContext& ctx, bool gpu) {
    StubOptions options = shared_->base;
    const std::string where = gpu ? fmt::format("GPU {}", ctx.device_id) : std::string("CPU");
    if (shared_->mode == HostingMode::kProcessPerInstance) {
      options.label = fmt::format("{} instance '{}'", shared_->model_label, ctx.name);
      return Stub::Start(std::move(options));
    }
    const int key = gpu ? ctx.device_id : -1;
    // Held across the start: a device's second instance waits for its stub rather than start
    // another (the runtime creates a model's instances one at a time anyway).
    MutexLock lock(shared_->mu);
    if (auto it = shared_->stubs.find(key); it != shared_->stubs.end()) return it->second;
    options.label = fmt::format("{} on {}", shared_->model_label, where);
    VRAMD_ASSIGN_OR_RETURN(auto stub, Stub::Start(std::move(options)));
    shared_->stubs[key] = stub;
    return stub;
  }

  const std::shared_ptr<RemoteShared> shared_;
};

}  // namespace

std::string HostingKey(std::string_view backend) {
  std::string key = "VRAMD_";
  for (char c : backend) key += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return key + "_HOSTING";
}

Result<Hosting> ChooseHosting(const config::ModelConfig& config, std::string_view backend) {
  Hosting hosting;
  const std::string key = HostingKey(backend);
  const auto& parameters = config.parameters();
  if (auto it = parameters.find("EXECUTION_ENV_PATH"); it != parameters.end()) {
    hosting.execution_env = it->second.string_value();
  }
  std::optional<std::string> asked;
  if (auto it = parameters.find(key); it != parameters.end()) asked = it->second.string_value();
  if (!asked.has_value()) {
    // --backend-config=<backend>,default-hosting=... (backend_config.h), already checked;
    // an execution env still needs a process of its own.
    const std::string fallback = BackendSettingValue(backend, "default-hosting").value_or("");
    hosting.mode = fallback == "process_per_instance" ? HostingMode::kProcessPerInstance
                   : fallback == "stub" || !hosting.execution_env.empty() ? HostingMode::kStub
                                                                          : HostingMode::kInProcess;
    return hosting;
  }
  if (*asked == "in_process") {
    if (!hosting.execution_env.empty()) {
      return Status::InvalidArgument(fmt::format(
          "model '{}': parameter {} is \"in_process\", but EXECUTION_ENV_PATH needs a process of "
          "its own (use \"stub\" or \"process_per_instance\")", config.name(), key));
    }
    hosting.mode = HostingMode::kInProcess;
  } else if (*asked == "stub") {
    hosting.mode = HostingMode::kStub;
  } else if (*asked == "process_per_instance") {
    hosting.mode = HostingMode::kProcessPerInstance;
  } else {
    return Status::InvalidArgument(fmt::format(
        "model '{}': parameter {} is \"{}\"; it takes \"in_process\" (the default), \"stub\" or "
        "\"process_per_instance\"", config.name(), key, *asked));
  }
  return hosting;
}

Result<std::chrono::milliseconds> ChooseCallTimeout(const config::ModelConfig& config,
                                                    std::string_view backend) {
  std::string value;
  std::string from;
  const auto& parameters = config.parameters();
  if (auto it = parameters.find(std::string(kCallTimeoutKey)); it != parameters.end()) {
    value = it->second.string_value();
    from = fmt::format("model '{}': parameter {}", config.name(), kCallTimeoutKey);
  } else if (auto setting = BackendSettingValue(backend, kCallTimeoutSetting); setting.has_value()) {
    value = *setting;  // checked by ParseBackendSetting already; checked again, cheaply
    from = fmt::format("--backend-config {}", kCallTimeoutSetting);
  } else {
    return kDefaultCallTimeout;
  }
  uint64_t ms = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), ms);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size() ||
      ms > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return Status::InvalidArgument(fmt::format(
        "{} is \"{}\"; it takes a whole number of milliseconds up to {} (0: no timeout)", from,
        value, std::numeric_limits<int32_t>::max()));
  }
  return std::chrono::milliseconds(ms);
}

Result<fs::path> BackendHostExecutable(const fs::path& library) {
  std::vector<fs::path> tried;
  if (const char* env = std::getenv("VRAMD_BACKEND_HOST"); env != nullptr && *env != '\0') {
    return fs::path(env);
  }
  std::error_code ec;
  tried.push_back(library.parent_path().parent_path() / "vramd_backend_host");
  if (std::string_view(VRAMD_BACKEND_HOST_DEFAULT) != "") tried.emplace_back(VRAMD_BACKEND_HOST_DEFAULT);
  for (const fs::path& p : tried) {
    if (fs::is_regular_file(p, ec)) return p;
  }
  std::string list;
  for (const fs::path& p : tried) list += (list.empty() ? "" : ", ") + p.string();
  return Status::NotFound(fmt::format(
      "vramd_backend_host, which hosts backends out of process, is not in {} (set "
      "VRAMD_BACKEND_HOST to its path)", list));
}

HostingBackend::HostingBackend(std::unique_ptr<Backend> in_process, fs::path library)
    : in_process_(std::move(in_process)), library_(std::move(library)) {}

Status HostingBackend::AutoCompleteConfig(const fs::path& model_dir, int64_t version,
                                          config::ModelConfig* config) {
  VRAMD_ASSIGN_OR_RETURN(Hosting hosting, ChooseHosting(*config, name()));
  if (hosting.mode == HostingMode::kInProcess) {
    return in_process_->AutoCompleteConfig(model_dir, version, config);
  }
  const std::string model = fmt::format("model '{}'", config->name());
  VRAMD_ASSIGN_OR_RETURN(const std::chrono::milliseconds call_timeout,
                         ChooseCallTimeout(*config, name()));
  std::unique_ptr<ExecutionEnv> env;
  if (!hosting.execution_env.empty()) {
    auto prepared = ExecutionEnv::Prepare(hosting.execution_env, model_dir, library_);
    if (!prepared.ok()) return prepared.status().WithContext(model);
    env = std::move(prepared).value();
  }
  auto host = BackendHostExecutable(library_);
  if (!host.ok()) return host.status().WithContext(model);
  // Allocates nothing: no model of this config exists yet (as in-process).
  abi::ServerApi server(std::string(name()), nullptr, nullptr);
  StubOptions options;
  options.host_executable = *host;
  options.library = library_;
  options.backend_name = std::string(name());
  options.label = fmt::format("{} (auto-completing its config)", model);
  if (env != nullptr) options.environment = env->Environment();
  options.model.name = config->name();
  options.model.version = version;
  options.model.model_dir = model_dir.string();
  options.model.version_dir = version > 0 ? (model_dir / std::to_string(version)).string() : "";
  options.model.config_json = config::ModelConfigToJson(*config);
  options.server = server.table();
  options.call_timeout = call_timeout;
  VRAMD_ASSIGN_OR_RETURN(std::optional<std::string> completed, Stub::AutoComplete(options));
  if (!completed.has_value()) return Status::Ok();
  auto parsed = config::ModelConfigFromJson(*completed);
  if (!parsed.ok()) {
    return Status::InvalidArgument(fmt::format("backend '{}' returned a config that is not one: {}",
                                               name(), parsed.status().message()));
  }
  *config = std::move(parsed).value();
  return Status::Ok();
}

Result<std::unique_ptr<BackendModel>> HostingBackend::LoadModel(const ModelContext& ctx) {
  if (ctx.config == nullptr || ctx.allocator == nullptr) return in_process_->LoadModel(ctx);
  VRAMD_ASSIGN_OR_RETURN(Hosting hosting, ChooseHosting(*ctx.config, name()));
  if (hosting.mode == HostingMode::kInProcess) return in_process_->LoadModel(ctx);
  VRAMD_ASSIGN_OR_RETURN(const std::chrono::milliseconds call_timeout,
                         ChooseCallTimeout(*ctx.config, name()));

  auto shared = std::make_shared<RemoteShared>();
  shared->mode = hosting.mode;
  shared->model_label = fmt::format("model '{}' version {}", ctx.name, ctx.version);
  shared->library_takes_gpu_inputs = in_process_->AcceptsGpuInputs();
  shared->server = std::make_unique<abi::ServerApi>(std::string(name()), ctx.allocator, ctx.services);
  if (!hosting.execution_env.empty()) {
    auto env = ExecutionEnv::Prepare(hosting.execution_env, ctx.model_dir, library_);
    if (!env.ok()) return env.status().WithContext(fmt::format("model '{}'", ctx.name));
    shared->env = std::move(env).value();
  }
  auto host = BackendHostExecutable(library_);
  if (!host.ok()) return host.status().WithContext(fmt::format("model '{}'", ctx.name));
  StubOptions& base = shared->base;
  base.host_executable = *host;
  base.library = library_;
  base.backend_name = std::string(name());
  if (shared->env != nullptr) base.environment = shared->env->Environment();
  base.model.name = ctx.name;
  base.model.version = ctx.version;
  base.model.model_dir = ctx.model_dir.string();
  base.model.version_dir = ctx.version_dir.string();
  base.model.config_json = config::ModelConfigToJson(*ctx.config);
  base.model.owner = ctx.owner;
  base.server = shared->server->table();
  base.call_timeout = call_timeout;
  return std::unique_ptr<BackendModel>(std::make_unique<RemoteModel>(std::move(shared)));
}

}  // namespace vramd::backends::remote
