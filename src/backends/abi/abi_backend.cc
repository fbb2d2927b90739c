#include "backends/abi/abi_backend.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "backends/abi/abi_bridge.h"
#include "backends/abi/abi_responses.h"
#include "config/model_config_json.h"
#include "core/data_type.h"
#include "memory/cuda_devices.h"

namespace vramd::backends {
namespace {

// The smallest table of version 1: what it had before fields were appended (up to execute).
// An appended field is read only where struct_size covers it.
constexpr size_t kMinimumApiSize =
    offsetof(VramdBackendApi, execute) + sizeof(VramdBackendApi::execute);

static_assert(static_cast<int>(VRAMD_TYPE_BYTES) == static_cast<int>(DataType::kBytes) &&
                  static_cast<int>(VRAMD_TYPE_BF16) == static_cast<int>(DataType::kBf16),
              "VramdDataType must keep vramd::DataType's (Triton's) numbering");

// A backend's model, destroyed (model_destroy) when the BackendModel and every instance are gone.
// Everything the backend was handed at model_create lives here, so pointers it kept stay valid.
struct ModelHandle {
  const VramdBackendApi* api = nullptr;
  std::string backend;
  std::string error_context;  // AbiBackend::error_context_
  bool linked = false;        // a built-in (AbiBackend::linked())
  std::unique_ptr<abi::ServerApi> server;
  std::string name, model_dir, version_dir, config_json;
  void* model = nullptr;
  bool checks_readiness = false;  // AbiBackend::ChecksReadiness()
  bool gpu_inputs = false;        // the table's accepts_gpu_inputs
  bool can_sleep = false;         // the table has model_sleep and model_wake
  bool sleeps_in_place = false;   // the table's sleeps_in_place

  ~ModelHandle() {
    if (model != nullptr) api->model_destroy(model);
  }
};

// Points the model's record_load_phase at the load in progress for one call.
class LoadTimingScope {
 public:
  LoadTimingScope(abi::ServerApi* server, LoadTiming* timing) : server_(server) {
    server_->set_load_timing(timing);
  }
  ~LoadTimingScope() { server_->set_load_timing(nullptr); }
  LoadTimingScope(const LoadTimingScope&) = delete;
  LoadTimingScope& operator=(const LoadTimingScope&) = delete;

 private:
  abi::ServerApi* const server_;
};

// Where VramdOutputs::add, add_on_device and add_from_input append: tensors whose buffers the
// backend fills before returning, or the request's own inputs. GPU ones come from `allocator`,
// charged to the request that runs.
struct OutputSink {
  std::vector<Tensor>* outputs;
  size_t first;  // outputs of this call start here
  memory::Allocator* allocator;
  const InferRequest* request;
};

// Appends output `name` in the memory the request's consumer gave for it on `gpu` (kOnHost:
// host), when it gave some there: true, with *data set. False leaves the output to be made.
Result<bool> AppendGiven(OutputSink& sink, const char* entry, const char* name,
                         VramdDataType datatype, const int64_t* shape, size_t rank,
                         size_t byte_size, int gpu, void** data) {
  const OutputBufferSource& source = sink.request->output_buffer;
  if (source == nullptr || name == nullptr) return false;
  std::optional<OutputBuffer> given = source(name, byte_size);
  if (!given || given->gpu != gpu || given->data.size() != byte_size) return false;
  VRAMD_ASSIGN_OR_RETURN(Tensor tensor, abi::NewOutput(*sink.outputs, sink.first, entry, name,
                                                       datatype, shape, rank, byte_size));
  tensor.data = std::move(given->data);
  tensor.gpu = gpu;
  *data = const_cast<std::byte*>(tensor.data.data());
  sink.outputs->push_back(std::move(tensor));
  return true;
}

template <typename Add>
VramdCode Guard(const char* entry, size_t byte_size, VramdError* error, Add add) {
  try {
    return add();
  } catch (const std::bad_alloc&) {
    abi::SetError(error, fmt::format("{}: out of host memory for {} bytes", entry, byte_size));
    return VRAMD_RESOURCE_EXHAUSTED;
  } catch (const std::exception& e) {
    abi::SetError(error, fmt::format("{}: {}", entry, e.what()));
    return VRAMD_INTERNAL;
  } catch (...) {
    abi::SetError(error, fmt::format("{}: unknown exception", entry));
    return VRAMD_INTERNAL;
  }
}

VramdCode Failed(VramdError* error, const Status& status) {
  abi::SetError(error, status.message());
  return abi::ToVramdCode(status.code());
}

// Host outputs from this size up come from the server's CPU pool, charged to the request: its
// cached segments keep their pages mapped between requests, where a fresh buffer this large
// (above glibc's mmap threshold) is mapped, faulted in page by page and unmapped every time.
constexpr size_t kPooledHostOutputBytes = size_t{1} << 20;

VramdCode AddOutput(void* sink_ptr, const char* name, VramdDataType datatype,
                    const int64_t* shape, size_t rank, size_t byte_size, void** data,
                    VramdError* error) {
  return Guard("outputs->add", byte_size, error, [&] {
    if (data == nullptr) return Failed(error, Status::InvalidArgument("outputs->add: `data` is NULL"));
    *data = nullptr;
    auto* sink = static_cast<OutputSink*>(sink_ptr);
    auto given = AppendGiven(*sink, "outputs->add", name, datatype, shape, rank, byte_size,
                             kOnHost, data);
    if (!given.ok()) return Failed(error, given.status());
    if (*given) return VRAMD_OK;
    if (byte_size >= kPooledHostOutputBytes && sink->allocator != nullptr) {
      auto tensor = abi::NewPooledOutput(*sink->allocator, memory::Device::Cpu(),
                                         memory::OwnerScope::Current(), *sink->outputs,
                                         sink->first, "outputs->add", name, datatype, shape, rank,
                                         byte_size);
      if (!tensor.ok()) return Failed(error, tensor.status());
      *data = const_cast<std::byte*>(tensor->data.data());
      sink->outputs->push_back(std::move(tensor).value());
      return VRAMD_OK;
    }
    auto added = abi::AppendHostOutput(sink->outputs, sink->first, "outputs->add", name,
                                       datatype, shape, rank, byte_size);
    if (!added.ok()) return Failed(error, added.status());
    *data = *added;
    return VRAMD_OK;
  });
}

VramdCode AddOutputOnDevice(void* sink_ptr, const char* name, VramdDataType datatype,
                            const int64_t* shape, size_t rank, size_t byte_size,
                            VramdDeviceKind kind, int32_t device_id, void** data,
                            VramdError* error) {
  // Read as the integer a library wrote: a value the enum lacks must not be loaded as one.
  int32_t memory_kind = VRAMD_DEVICE_CPU;
  std::memcpy(&memory_kind, &kind, sizeof memory_kind);
  if (memory_kind != VRAMD_DEVICE_GPU) {
    if (memory_kind != VRAMD_DEVICE_CPU && memory_kind != VRAMD_DEVICE_CUDA_HOST) {
      return Failed(error, Status::InvalidArgument(fmt::format(
                               "outputs->add_on_device '{}': unknown memory kind {}",
                               name != nullptr ? name : "(NULL)", memory_kind)));
    }
    return AddOutput(sink_ptr, name, datatype, shape, rank, byte_size, data, error);
  }
  return Guard("outputs->add_on_device", byte_size, error, [&] {
    if (data == nullptr) {
      return Failed(error, Status::InvalidArgument("outputs->add_on_device: `data` is NULL"));
    }
    *data = nullptr;
    auto* sink = static_cast<OutputSink*>(sink_ptr);
    auto device = abi::ToDevice(VRAMD_DEVICE_GPU, device_id);
    if (!device.ok()) return Failed(error, device.status());
    auto given = AppendGiven(*sink, "outputs->add_on_device", name, datatype, shape, rank,
                             byte_size, device_id, data);
    if (!given.ok()) return Failed(error, given.status());
    if (*given) return VRAMD_OK;
    if (sink->allocator == nullptr) {
      return Failed(error, Status::Unavailable("outputs->add_on_device: this server allocates no memory"));
    }
    auto tensor = abi::NewPooledOutput(*sink->allocator, *device, memory::OwnerScope::Current(),
                                       *sink->outputs, sink->first, "outputs->add_on_device",
                                       name, datatype, shape, rank, byte_size);
    if (!tensor.ok()) return Failed(error, tensor.status());
    *data = const_cast<std::byte*>(tensor->data.data());
    sink->outputs->push_back(std::move(tensor).value());
    return VRAMD_OK;
  });
}

VramdCode AddFromInput(void* sink_ptr, const char* name, size_t input_index, VramdError* error) {
  constexpr const char* kEntry = "outputs->add_from_input";
  auto* sink = static_cast<OutputSink*>(sink_ptr);
  const std::vector<Tensor>& inputs = sink->request->inputs;
  const Tensor* found = input_index < inputs.size() ? &inputs[input_index] : nullptr;
  const size_t byte_size = found != nullptr ? found->data.size() : 0;
  return Guard(kEntry, byte_size, error, [&] {
    if (found == nullptr) {
      return Failed(error, Status::InvalidArgument(fmt::format(
                               "{} '{}': input_index {} but the request has {} input(s)", kEntry,
                               name != nullptr ? name : "(NULL)", input_index, inputs.size())));
    }
    const Tensor& in = *found;
    const auto datatype = static_cast<VramdDataType>(static_cast<int>(in.datatype));
    if (in.data.lent()) {
      // Valid only for the call (a BLS caller's inputs_outlive_call): the answer gets a copy.
      void* data = nullptr;
      const VramdCode code =
          in.on_gpu() ? AddOutputOnDevice(sink_ptr, name, datatype, in.shape.data(),
                                          in.shape.size(), byte_size, VRAMD_DEVICE_GPU, in.gpu,
                                          &data, error)
                      : AddOutput(sink_ptr, name, datatype, in.shape.data(), in.shape.size(),
                                  byte_size, &data, error);
      if (code != VRAMD_OK) return code;
      const memory::Device where = memory::Device::OfTensorGpu(in.gpu);
      Status copied = memory::CopyBytes(where, data, where, in.data.data(), byte_size, nullptr);
      if (!copied.ok()) {
        return Failed(error, copied.WithContext(fmt::format("{} '{}'", kEntry, name)));
      }
      return VRAMD_OK;
    }
    auto tensor = abi::NewOutput(*sink->outputs, sink->first, kEntry, name, datatype,
                                 in.shape.data(), in.shape.size(), byte_size);
    if (!tensor.ok()) return Failed(error, tensor.status());
    tensor->data = in.data;
    tensor->gpu = in.gpu;
    sink->outputs->push_back(std::move(tensor).value());
    return VRAMD_OK;
  });
}

class AbiInstance final : public BackendInstance {
 public:
  AbiInstance(std::shared_ptr<ModelHandle> model, std::string name, void* instance)
      : model_(std::move(model)), name_(std::move(name)), instance_(instance) {}
  ~AbiInstance() override { model_->api->instance_destroy(instance_); }

  Status Execute(const InferRequest& request, std::vector<Tensor>* outputs) override {
    const size_t first = outputs->size();
    try {
      abi::RequestView view;
      abi::ViewRequest(request, &view);
      VramdRequest& vreq = view.request;
      // The runtime runs Execute under the request's owner, a lazy one: asking opens it, a
      // ledger entry per request. The built-ins take no memory per request, so they get 0,
      // which allocate reads as that same current owner should one ever ask.
      vreq.owner = model_->linked ? memory::kNoOwner : memory::OwnerScope::Current();
      // A backend that does not take GPU inputs is given host inputs, and its GPU outputs would
      // be moved to host: it is asked for host outputs.
      if (!model_->gpu_inputs) vreq.preferred_output_memory = abi::PreferredOutputMemory(kOnHost);

      OutputSink sink{outputs, first, model_->server->allocator(), &request};
      VramdOutputs vouts{sizeof(VramdOutputs), &sink, &AddOutput, &AddOutputOnDevice,
                         &AddFromInput};
      VramdError error{};
      const VramdCode code = model_->api->execute(instance_, &vreq, &vouts, &error);
      if (code == VRAMD_OK) return Status::Ok();
      outputs->resize(first);  // a failed execute's partial outputs are not an answer
      Status status = abi::FromVramd(code, error, model_->error_context);
      // A built-in's execute errors name its instance already.
      if (model_->linked) return status;
      return status.WithContext(fmt::format("instance '{}'", name_));
    } catch (const std::exception& e) {
      outputs->resize(first);
      return Status::Internal(fmt::format("backend '{}' instance '{}': {}", model_->backend,
                                          name_, e.what()));
    }
  }

  Status ExecuteRequests(std::span<const ListedRequest> requests) override {
    std::vector<VramdResponder*> responders;
    responders.reserve(requests.size());
    Status status;
    try {
      std::vector<abi::RequestView> views(requests.size());  // no reallocation: pointers kept
      std::vector<VramdRequest*> list;
      list.reserve(requests.size());
      for (size_t i = 0; i < requests.size(); ++i) {
        abi::ViewRequest(*requests[i].request, &views[i]);
        views[i].request.owner = requests[i].OpenOwner();
        responders.push_back(abi::NewResponder(requests[i]));
        views[i].request.responder = responders.back();
        list.push_back(&views[i].request);
      }
      VramdError error{};
      const VramdCode code =
          model_->api->execute_requests(instance_, list.data(), list.size(), &error);
      if (code != VRAMD_OK) {
        status = abi::FromVramd(code, error, model_->error_context);
        if (!model_->linked) status = status.WithContext(fmt::format("instance '{}'", name_));
      }
    } catch (const std::exception& e) {
      status = Status::Internal(fmt::format("backend '{}' instance '{}': {}", model_->backend,
                                            name_, e.what()));
    }
    // A failed call hands back what the backend has not completed (include/vramd/backend.h);
    // a made responder is released in every case.
    for (VramdResponder* r : responders) abi::ReleaseAfterExecute(r, status.ok() ? nullptr : &status);
    // The runtime answers a failed call's requests itself, but they are answered already.
    return status;
  }

  Status Ready() override {
    if (!model_->checks_readiness) return Status::Ok();
    try {
      VramdError error{};
      const VramdCode code = model_->api->instance_ready(instance_, &error);
      if (code == VRAMD_OK) return Status::Ok();
      return abi::FromVramd(code, error, model_->error_context)
          .WithContext(fmt::format("instance '{}'", name_));
    } catch (const std::exception& e) {
      return Status::Internal(fmt::format("backend '{}' instance '{}': readiness: {}",
                                          model_->backend, name_, e.what()));
    }
  }

 private:
  const std::shared_ptr<ModelHandle> model_;  // keeps model_destroy after instance_destroy
  const std::string name_;
  void* const instance_;
};

class AbiModel final : public BackendModel {
 public:
  explicit AbiModel(std::shared_ptr<ModelHandle> model) : model_(std::move(model)) {}

  Result<std::unique_ptr<BackendInstance>> CreateInstance(const InstanceContext& ctx) override {
    try {
      VramdInstanceInfo info{};
      info.struct_size = sizeof(VramdInstanceInfo);
      info.name = ctx.name.c_str();
      info.index = ctx.index;
      info.kind = ctx.kind == DeviceKind::kGpu ? VRAMD_DEVICE_GPU : VRAMD_DEVICE_CPU;
      info.device_id = ctx.kind == DeviceKind::kGpu ? ctx.device_id : -1;
      info.owner = ctx.owner;
      void* instance = nullptr;
      VramdError error{};
      VramdCode code;
      {
        LoadTimingScope timing(model_->server.get(), ctx.timing);
        code = model_->api->instance_create(model_->model, &info, &instance, &error);
      }
      if (code != VRAMD_OK) return abi::FromVramd(code, error, model_->error_context);
      return std::unique_ptr<BackendInstance>(
          std::make_unique<AbiInstance>(model_, ctx.name, instance));
    } catch (const std::exception& e) {
      return Status::Internal(fmt::format("backend '{}': creating instance '{}': {}",
                                          model_->backend, ctx.name, e.what()));
    }
  }

  bool TakesGpuInputs() const override { return model_->gpu_inputs; }

  bool CanSleep() const override { return model_->can_sleep; }
  bool SleepsInPlace() const override { return model_->sleeps_in_place; }

  Status Sleep(SleepLevel level) override {
    if (!model_->can_sleep) return CannotSleep();
    VramdError error{};
    const VramdCode code =
        model_->api->model_sleep(model_->model, static_cast<int32_t>(level), &error);
    if (code != VRAMD_OK) return abi::FromVramd(code, error, model_->error_context);
    return Status::Ok();
  }

  Status Wake() override {
    if (!model_->can_sleep) return CannotSleep();
    VramdError error{};
    const VramdCode code = model_->api->model_wake(model_->model, &error);
    if (code != VRAMD_OK) return abi::FromVramd(code, error, model_->error_context);
    return Status::Ok();
  }

 private:
  Status CannotSleep() const {
    return Status::Unsupported(fmt::format(
        "model '{}' cannot sleep: backend '{}' has no model_sleep and model_wake", model_->name,
        model_->backend));
  }

  const std::shared_ptr<ModelHandle> model_;
};

}  // namespace

AbiBackend::AbiBackend(const VramdBackendApi* api, std::string name,
                       std::optional<std::filesystem::path> library)
    : library_(std::move(library)),
      name_(std::move(name)),
      api_(api),
      error_context_(library_.has_value() ? fmt::format("backend '{}'", name_) : "") {}

Result<std::unique_ptr<AbiBackend>> AbiBackend::Create(
    const VramdBackendApi* api, std::string name, std::optional<std::filesystem::path> library) {
  const std::string origin = library.has_value()
                                 ? fmt::format("backend library '{}'", library->string())
                                 : fmt::format("built-in backend '{}'", name);
  if (api == nullptr) {
    return Status::InvalidArgument(
        fmt::format("{} returned no API table for vramd's backend ABI version {}", origin,
                    VRAMD_BACKEND_ABI_VERSION));
  }
  if (api->abi_version != VRAMD_BACKEND_ABI_VERSION) {
    return Status::InvalidArgument(fmt::format(
        "{} was built for backend ABI version {}, but this vramd speaks version {}; rebuild the "
        "backend against this vramd's include/vramd/backend.h",
        origin, api->abi_version, VRAMD_BACKEND_ABI_VERSION));
  }
  if (api->struct_size < kMinimumApiSize) {
    return Status::InvalidArgument(
        fmt::format("{}: its API table is {} bytes, ABI version {} needs at least {}", origin,
                    api->struct_size, VRAMD_BACKEND_ABI_VERSION, kMinimumApiSize));
  }
  if (api->model_create == nullptr || api->model_destroy == nullptr ||
      api->instance_create == nullptr || api->instance_destroy == nullptr ||
      api->execute == nullptr) {
    return Status::InvalidArgument(fmt::format(
        "{}: its API table leaves an entry point NULL (model_create, model_destroy, "
        "instance_create, instance_destroy and execute are all required)",
        origin));
  }
  if (api->name == nullptr || name != api->name) {
    return Status::InvalidArgument(
        fmt::format("{} calls itself '{}', but it was loaded as backend '{}'", origin,
                    api->name != nullptr ? api->name : "(NULL)", name));
  }
  return std::unique_ptr<AbiBackend>(new AbiBackend(api, std::move(name), std::move(library)));
}

bool AbiBackend::TakesRequestLists() const {
  constexpr size_t kEnd =
      offsetof(VramdBackendApi, execute_requests) + sizeof(VramdBackendApi::execute_requests);
  return api_->struct_size >= kEnd && api_->execute_requests != nullptr;
}

bool AbiBackend::AcceptsGpuInputs() const {
  constexpr size_t kEnd = offsetof(VramdBackendApi, accepts_gpu_inputs) +
                          sizeof(VramdBackendApi::accepts_gpu_inputs);
  return api_->struct_size >= kEnd && api_->accepts_gpu_inputs != 0;
}

bool AbiBackend::ModelsCanSleep() const {
  constexpr size_t kEnd =
      offsetof(VramdBackendApi, model_wake) + sizeof(VramdBackendApi::model_wake);
  return api_->struct_size >= kEnd && api_->model_sleep != nullptr && api_->model_wake != nullptr;
}

bool AbiBackend::ModelsSleepInPlace() const {
  constexpr size_t kEnd =
      offsetof(VramdBackendApi, sleeps_in_place) + sizeof(VramdBackendApi::sleeps_in_place);
  return api_->struct_size >= kEnd && api_->sleeps_in_place != 0;
}

bool AbiBackend::ChecksReadiness() const {
  constexpr size_t kEnd =
      offsetof(VramdBackendApi, instance_ready) + sizeof(VramdBackendApi::instance_ready);
  return api_->struct_size >= kEnd && api_->instance_ready != nullptr;
}

Status AbiBackend::AutoCompleteConfig(const std::filesystem::path& model_dir, int64_t version,
                                      config::ModelConfig* config) {
  constexpr size_t kEnd = offsetof(VramdBackendApi, auto_complete_config) +
                          sizeof(VramdBackendApi::auto_complete_config);
  if (api_->struct_size < kEnd || api_->auto_complete_config == nullptr) return Status::Ok();
  try {
    // Allocates nothing: no model of this config exists yet, so there is no owner to charge.
    abi::ServerApi server(name_, nullptr, nullptr);
    const std::string name = config->name();
    const std::string dir = model_dir.string();
    const std::string version_dir = version > 0 ? (model_dir / std::to_string(version)).string()
                                                : std::string();
    const std::string json = config::ModelConfigToJson(*config);
    VramdModelInfo info{};
    info.struct_size = sizeof(VramdModelInfo);
    info.name = name.c_str();
    info.version = version;
    info.model_dir = dir.c_str();
    info.version_dir = version_dir.c_str();
    info.config_json = json.c_str();
    info.config_json_size = json.size();
    info.server = server.table();
    std::optional<std::string> completed;
    auto complete = [](void* context, const char* text, size_t size) {
      auto* out = static_cast<std::optional<std::string>*>(context);
      if (!out->has_value() && text != nullptr) out->emplace(text, size);
    };
    VramdError error{};
    const VramdCode code = api_->auto_complete_config(&info, complete, &completed, &error);
    if (code != VRAMD_OK) return abi::FromVramd(code, error, error_context_);
    if (!completed.has_value()) return Status::Ok();
    auto parsed = config::ModelConfigFromJson(*completed);
    if (!parsed.ok()) {
      return Status::InvalidArgument(fmt::format(
          "backend '{}' returned a config that is not one: {}", name_,
          parsed.status().message()));
    }
    *config = std::move(parsed).value();
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Internal(fmt::format("backend '{}': {}", name_, e.what()));
  }
}

bool AbiBackend::ExecutesOnInstanceThreads() const {
  // An older library's table ends before the field: what lies past it is not the table's.
  constexpr size_t kEnd = offsetof(VramdBackendApi, execute_on_instance_threads) +
                          sizeof(VramdBackendApi::execute_on_instance_threads);
  return api_->struct_size >= kEnd && api_->execute_on_instance_threads != 0;
}

Result<std::unique_ptr<BackendModel>> AbiBackend::LoadModel(const ModelContext& ctx) {
  if (ctx.config == nullptr || ctx.allocator == nullptr) {
    return Status::Internal(
        fmt::format("model '{}': LoadModel called without a config or allocator", ctx.name));
  }
  try {
    auto handle = std::make_shared<ModelHandle>();
    handle->api = api_;
    handle->backend = name_;
    handle->error_context = error_context_;
    handle->linked = linked();
    handle->server = std::make_unique<abi::ServerApi>(name_, ctx.allocator, ctx.services);
    handle->name = ctx.name;
    handle->model_dir = ctx.model_dir.string();
    handle->version_dir = ctx.version_dir.string();
    handle->config_json = config::ModelConfigToJson(*ctx.config);
    handle->checks_readiness = ChecksReadiness();
    handle->gpu_inputs = AcceptsGpuInputs();
    handle->can_sleep = ModelsCanSleep();
    handle->sleeps_in_place = ModelsSleepInPlace();

    VramdModelInfo info{};
    info.struct_size = sizeof(VramdModelInfo);
    info.name = handle->name.c_str();
    info.version = ctx.version;
    info.model_dir = handle->model_dir.c_str();
    info.version_dir = handle->version_dir.c_str();
    info.config_json = handle->config_json.c_str();
    info.config_json_size = handle->config_json.size();
    info.owner = ctx.owner;
    info.server = handle->server->table();
    VramdError error{};
    VramdCode code;
    {
      LoadTimingScope timing(handle->server.get(), ctx.timing);
      code = api_->model_create(&info, &handle->model, &error);
    }
    if (code != VRAMD_OK) {
      handle->model = nullptr;  // a failed create owns nothing to destroy
      return abi::FromVramd(code, error, error_context_);
    }
    return std::unique_ptr<BackendModel>(std::make_unique<AbiModel>(std::move(handle)));
  } catch (const std::exception& e) {
    return Status::Internal(fmt::format("backend '{}': loading model '{}': {}", name_, ctx.name,
                                        e.what()));
  }
}

}  // namespace vramd::backends
