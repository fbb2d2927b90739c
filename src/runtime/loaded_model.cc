#include "runtime/loaded_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "memory/cuda_devices.h"
#include "runtime/request_validator.h"

namespace vramd::runtime {
namespace {

// REQUIRES: config normalized (group names and counts set). Resolves KIND_AUTO and checks GPU
// groups against the devices present. Built-in backends are
// CPU backends, so KIND_AUTO means CPU until a backend says it can use a GPU.
Result<std::vector<backends::InstanceContext>> PlanInstances(const config::ModelConfig& config) {
  std::vector<backends::InstanceContext> plan;
  const int gpus = memory::CudaDeviceCount();
  int index = 0;
  for (int g = 0; g < config.instance_group_size(); ++g) {
    const auto& group = config.instance_group(g);
    const std::string& group_name = group.name();
    const int count = group.count();
    switch (group.kind()) {
      case config::ModelInstanceGroup::KIND_CPU:
      case config::ModelInstanceGroup::KIND_AUTO:
        for (int i = 0; i < count; ++i) {
          plan.push_back({fmt::format("{}_{}", group_name, i), index++,
                          backends::DeviceKind::kCpu, -1});
        }
        break;
      case config::ModelInstanceGroup::KIND_GPU: {
        if (gpus == 0) {
          return Status::InvalidArgument(fmt::format(
              "instance_group '{}' asks for KIND_GPU but no GPU is available ({})", group_name,
              memory::CudaDescription()));
        }
        std::vector<int> devices(group.gpus().begin(), group.gpus().end());
        if (devices.empty())
          for (int d = 0; d < gpus; ++d) devices.push_back(d);
        for (int d : devices) {
          if (d < 0 || d >= gpus) {
            return Status::InvalidArgument(fmt::format(
                "instance_group '{}' names GPU {} but this server sees {} GPU(s)", group_name, d,
                gpus));
          }
          for (int i = 0; i < count; ++i) {
            plan.push_back({fmt::format("{}_{}_gpu{}", group_name, i, d), index++,
                            backends::DeviceKind::kGpu, d});
          }
        }
        break;
      }
      default:
        return Status::Unsupported(fmt::format(
            "instance_group '{}': kind {} is not supported", group_name,
            config::ModelInstanceGroup::Kind_Name(group.kind())));
    }
  }
  if (plan.empty()) plan.push_back({fmt::format("{}_0", config.name()), 0, backends::DeviceKind::kCpu, -1});
  return plan;
}

}  // namespace

LoadedModel::LoadedModel(std::shared_ptr<const config::ModelConfig> config, int64_t version,
                         const MemoryContext& memory, memory::OwnerId model_owner)
    : config_(std::move(config)),
      version_(version),
      memory_(memory),
      owner_(memory.ledger, model_owner, memory::OwnerKind::kVersion, std::to_string(version)) {}

LoadedModel::~LoadedModel() {
  instances_.clear();  // before backend_model_, whose state they may use
  {
    memory::OwnerScope scope(owner_.id());  // the backend frees what it holds as the version
    backend_model_.reset();
  }
  owner_.Close();
}

Result<std::shared_ptr<LoadedModel>> LoadedModel::Load(
    std::shared_ptr<const config::ModelConfig> config, const std::filesystem::path& model_dir,
    int64_t version, const MemoryContext& memory, memory::OwnerId model_owner) {
  const std::string where = fmt::format("model '{}' version {}", config->name(), version);
  // On any failure below, destroying `model` releases what was created and closes its owners,
  // so a failed load leaves its owner at zero or files a leak naming it.
  std::shared_ptr<LoadedModel> model(new LoadedModel(config, version, memory, model_owner));

  auto backend = backends::FindBackend(*config);  // its errors name the model already
  if (!backend.ok()) return backend.status();
  auto plan = PlanInstances(*config);
  if (!plan.ok()) return plan.status().WithContext(where);

  backends::ModelContext ctx;
  ctx.name = config->name();
  ctx.version = version;
  ctx.model_dir = model_dir;
  ctx.version_dir = model_dir / std::to_string(version);
  ctx.config = config.get();
  ctx.allocator = memory.allocator;
  ctx.owner = model->owner_.id();
  {
    memory::OwnerScope scope(ctx.owner);
    auto backend_model = (*backend)->LoadModel(ctx);
    if (!backend_model.ok()) return backend_model.status().WithContext(where);
    model->backend_model_ = std::move(backend_model).value();
  }

  model->instances_.reserve(plan->size());
  for (auto& instance_ctx : *plan) {
    memory::ScopedOwner owner(memory.ledger, ctx.owner, memory::OwnerKind::kInstance,
                              instance_ctx.name);
    instance_ctx.owner = owner.id();
    memory::OwnerScope scope(owner.id());
    auto instance = model->backend_model_->CreateInstance(instance_ctx);
    if (!instance.ok()) {
      return instance.status().WithContext(
          fmt::format("{}: instance '{}'", where, instance_ctx.name));
    }
    model->free_instances_.push_back(model->instances_.size());
    model->instances_.emplace_back(std::move(owner), std::move(instance).value());
  }
  return model;
}

size_t LoadedModel::Acquire() {
  std::unique_lock lock(mu_);
  instance_freed_.wait(lock, [this] { return !free_instances_.empty(); });
  size_t index = free_instances_.back();
  free_instances_.pop_back();
  return index;
}

void LoadedModel::Release(size_t index) {
  {
    std::lock_guard lock(mu_);
    free_instances_.push_back(index);
  }
  instance_freed_.notify_one();
}

Result<InferOutcome> LoadedModel::Infer(const InferRequest& request) {
  VRAMD_RETURN_IF_ERROR(ValidateInferRequest(*config_, request));

  InferOutcome outcome;
  std::vector<Tensor> outputs;
  size_t index = Acquire();
  Instance& instance = instances_[index];
  outcome.request_owner = RequestOwner(
      memory_, instance.owner.id(),
      request.id.empty() ? fmt::format("#{}", ++request_sequence_) : request.id);
  Status status;
  {
    memory::OwnerScope scope(outcome.request_owner.lazy_owner());
    status = instance.backend->Execute(request, &outputs);
  }
  Release(index);
  if (!status.ok()) {
    return status.WithContext(fmt::format("model '{}' version {}", name(), version_));
  }

  InferResponse& response = outcome.response;
  response.id = request.id;
  response.model_name = name();
  response.model_version = version_;
  if (request.outputs.empty()) {
    response.outputs = std::move(outputs);
    return outcome;
  }
  response.outputs.reserve(request.outputs.size());
  for (const auto& wanted : request.outputs) {
    auto it = std::find_if(outputs.begin(), outputs.end(),
                           [&](const Tensor& t) { return t.name == wanted.name; });
    if (it == outputs.end()) {
      return Status::Internal(fmt::format(
          "model '{}' version {}: the backend did not produce requested output '{}'", name(),
          version_, wanted.name));
    }
    response.outputs.push_back(std::move(*it));
  }
  return outcome;
}

}  // namespace vramd::runtime
