#include "backends/mlp/mlp_backend.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>

#include "backends/mlp/mlp_cpu.h"
#include "backends/mlp/mlp_plan.h"
#include "backends/mlp/safetensors.h"
#include "core/load_timing.h"
#if VRAMD_WITH_CUDA
#include "backends/mlp/mlp_cuda.h"
#endif

namespace vramd::backends {
namespace {

using mlp::MlpPlan;

// Reads the weights file as the load's file_read phase; its bytes, the file's size, are known
// once it is read.
Result<safetensors::File> ReadWeights(const std::filesystem::path& path, LoadTiming* timing) {
  Result<safetensors::File> file = [&] {
    LoadTiming::Scope phase(timing, "file_read");
    return safetensors::File::Read(path);
  }();
  if (timing != nullptr && file.ok()) timing->Add("file_read", 0, file->file_bytes());
  return file;
}

// Host memory for the image the first GPU upload copies. Pinned (cuda_host), so that copy runs
// at the DMA rate rather than through the driver's pageable bounce buffers. Where pinned memory
// cannot be had the image goes to ordinary host memory: the upload is slower, not wrong. No
// CUDA device (Unavailable) is expected and silent; a failure with a GPU present is logged.
Result<memory::Buffer> AllocateStagingImage(memory::Allocator* allocator, size_t bytes,
                                            memory::OwnerId owner, std::string_view model) {
  auto pinned = allocator->Allocate(memory::Device::CudaHost(), bytes, 0, owner);
  if (pinned.ok()) return pinned;
  if (pinned.status().code() != StatusCode::kUnavailable) {
    spdlog::warn("model '{}': staging the weights in pageable host memory, so their upload runs "
                 "slower: {}",
                 model, pinned.status().message());
  }
  return allocator->Allocate(memory::Device::Cpu(), bytes, 0, owner);
}

class MlpModel final : public BackendModel {
 public:
  MlpModel(std::shared_ptr<const MlpPlan> plan, memory::Allocator* allocator, memory::OwnerId owner,
           std::shared_ptr<const mlp::CpuWeights> cpu_weights, mlp::PackedLayout gpu_layout,
           memory::Buffer gpu_image)
      : plan_(std::move(plan)),
        allocator_(allocator),
        owner_(owner),
        cpu_weights_(std::move(cpu_weights)),
        gpu_layout_(std::move(gpu_layout)),
        gpu_image_(std::move(gpu_image)) {}

  Result<std::unique_ptr<BackendInstance>> CreateInstance(const InstanceContext& ctx) override {
    if (ctx.kind == DeviceKind::kCpu) {
      if (cpu_weights_ == nullptr) {
        return Status::Internal(fmt::format(
            "model '{}': a CPU instance was asked for but the config has no CPU instance group, "
            "so no CPU weights were made",
            plan_->model));
      }
      return mlp::CreateCpuInstance(plan_, cpu_weights_, allocator_, ctx);
    }
#if VRAMD_WITH_CUDA
    VRAMD_ASSIGN_OR_RETURN(mlp::GpuDevice device, GpuDeviceFor(ctx.device_id, ctx.timing));
    return mlp::CreateGpuInstance(plan_, device, allocator_, ctx);
#else
    return Status::Unavailable(fmt::format(
        "model '{}': instance '{}' asks for GPU {}, but this server was built without CUDA",
        plan_->model, ctx.name, ctx.device_id));
#endif
  }

 private:
#if VRAMD_WITH_CUDA
  // The weights and cuBLAS handle on `device`, made by the first caller for that device, whose
  // copy is recorded in `timing` (may be null).
  Result<mlp::GpuDevice> GpuDeviceFor(int device, LoadTiming* timing) {
    std::lock_guard lock(mu_);
    if (auto it = gpu_devices_.find(device); it != gpu_devices_.end()) return it->second;
    if (gpu_devices_.empty() && !gpu_image_) {
      return Status::Internal(fmt::format(
          "model '{}': a GPU instance was asked for but the config has no KIND_GPU instance "
          "group, so no weights were staged for a GPU",
          plan_->model));
    }
    memory::OwnerScope scope(owner_);  // the weights belong to the version, not the instance
    auto weights =
        gpu_devices_.empty()
            ? mlp::UploadGpuWeights(gpu_image_.data(), gpu_layout_, device, allocator_, owner_,
                                    timing)
            : mlp::CopyGpuWeights(*gpu_devices_.begin()->second.weights, device, allocator_,
                                  owner_, timing);
    if (!weights.ok()) {
      return weights.status().WithContext(
          fmt::format("model '{}': loading the weights onto GPU {}", plan_->model, device));
    }
    auto made = mlp::MakeGpuDevice(std::move(weights).value());
    if (!made.ok()) {
      return made.status().WithContext(
          fmt::format("model '{}': setting up cuBLAS on GPU {}", plan_->model, device));
    }
    gpu_devices_.emplace(device, *made);
    gpu_image_.Reset();  // later devices copy from this one
    return made;
  }
#endif

  const std::shared_ptr<const MlpPlan> plan_;
  memory::Allocator* const allocator_;
  const memory::OwnerId owner_;  // the version's
  const std::shared_ptr<const mlp::CpuWeights> cpu_weights_;  // null without CPU groups
  const mlp::PackedLayout gpu_layout_;  // the file's element size

  std::mutex mu_;
  memory::Buffer gpu_image_;  // guarded by mu_; pinned host, until the first GPU upload
#if VRAMD_WITH_CUDA
  std::map<int, mlp::GpuDevice> gpu_devices_;  // guarded by mu_
#endif
};

}  // namespace

Result<std::unique_ptr<BackendModel>> MlpBackend::LoadModel(const ModelContext& ctx) {
  if (ctx.config == nullptr || ctx.allocator == nullptr) {
    return Status::Internal(fmt::format("model '{}': LoadModel called without a {}", ctx.name,
                                        ctx.config == nullptr ? "config" : "memory allocator"));
  }
  VRAMD_ASSIGN_OR_RETURN(MlpPlan plan, mlp::PlanFromConfig(ctx));
  auto file = ReadWeights(plan.weights_path, ctx.timing);
  if (!file.ok()) {
    return file.status().WithContext(fmt::format("model '{}': weights", ctx.name));
  }
  VRAMD_RETURN_IF_ERROR(mlp::PlanLayers(*file, &plan));

  const size_t file_element = plan.weight_type == mlp::WeightType::kFp16 ? 2 : 4;
  mlp::PackedLayout gpu_layout = mlp::MakeLayout(plan, file_element);
  // host_stage: the host images made from the file (the CPU instances' FP32 weights, the GPU
  // upload's image), allocation and pinning included; its bytes are those images' sizes.
  const size_t staged_bytes = (plan.needs_cpu ? mlp::MakeLayout(plan, 4).total_bytes : 0) +
                              (plan.needs_gpu ? gpu_layout.total_bytes : 0);
  std::shared_ptr<const mlp::CpuWeights> cpu_weights;
  memory::Buffer gpu_image;
  {
    LoadTiming::Scope phase(ctx.timing, "host_stage", staged_bytes);
    if (plan.needs_cpu) {
      VRAMD_ASSIGN_OR_RETURN(cpu_weights,
                             mlp::MakeCpuWeights(*file, plan, ctx.allocator, ctx.owner));
    }
    if (plan.needs_gpu) {
      VRAMD_ASSIGN_OR_RETURN(gpu_image, AllocateStagingImage(ctx.allocator, gpu_layout.total_bytes,
                                                             ctx.owner, ctx.name));
      mlp::PackWeights(*file, plan, gpu_layout, static_cast<std::byte*>(gpu_image.data()));
    }
  }
  return std::unique_ptr<BackendModel>(std::make_unique<MlpModel>(
      std::make_shared<const MlpPlan>(std::move(plan)), ctx.allocator, ctx.owner,
      std::move(cpu_weights), std::move(gpu_layout), std::move(gpu_image)));
}

}  // namespace vramd::backends
