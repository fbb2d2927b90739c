#include "backends/mlp/mlp_backend.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "backends/abi/backend_kit.h"
#include "backends/mlp/mlp_cpu.h"
#include "backends/mlp/mlp_plan.h"
#include "backends/mlp/safetensors.h"
#if VRAMD_WITH_CUDA
#include "backends/mlp/mlp_cuda.h"
#endif

namespace vramd::backends {
namespace {

using mlp::MlpPlan;

// Reads the weights file as the load's file_read phase; its bytes, the file's size, are known
// once it is read.
Result<safetensors::File> ReadWeights(const std::filesystem::path& path,
                                      const VramdServerApi* server) {
  const auto start = std::chrono::steady_clock::now();
  Result<safetensors::File> file = safetensors::File::Read(path);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  abi::RecordLoadPhase(server, "file_read", elapsed.count(), file.ok() ? file->file_bytes() : 0);
  return file;
}

// Host memory for the image the first GPU upload copies. Pinned (cuda_host), so that copy runs
// at the DMA rate rather than through the driver's pageable bounce buffers. Where pinned memory
// cannot be had the image goes to ordinary host memory: the upload is slower, not wrong. No
// CUDA device (Unavailable) is expected and silent; a failure with a GPU present is logged.
Result<abi::Allocation> AllocateStagingImage(const VramdServerApi* server, size_t bytes,
                                             VramdOwner owner, const std::string& model) {
  auto pinned = abi::Allocation::Make(server, owner, VRAMD_DEVICE_CUDA_HOST, -1, bytes);
  if (pinned.ok()) return pinned;
  if (pinned.status().code() != StatusCode::kUnavailable) {
    abi::Log(server, VRAMD_LOG_WARNING,
             fmt::format("model '{}': staging the weights in pageable host memory, so their "
                         "upload runs slower: {}",
                         model, pinned.status().message()));
  }
  return abi::Allocation::Make(server, owner, VRAMD_DEVICE_CPU, -1, bytes);
}

class MlpModel {
 public:
  using Instance = mlp::MlpInstance;

  static Result<std::unique_ptr<MlpModel>> Create(const VramdModelInfo& info);

  MlpModel(std::shared_ptr<const MlpPlan> plan, const VramdServerApi* server, VramdOwner owner,
           std::shared_ptr<const mlp::CpuWeights> cpu_weights, mlp::PackedLayout gpu_layout,
           abi::Allocation gpu_image)
      : plan_(std::move(plan)),
        server_(server),
        owner_(owner),
        cpu_weights_(std::move(cpu_weights)),
        gpu_layout_(std::move(gpu_layout)),
        gpu_image_(std::move(gpu_image)) {}

  Result<std::unique_ptr<Instance>> CreateInstance(const VramdInstanceInfo& info) {
    if (info.kind == VRAMD_DEVICE_CPU) {
      if (cpu_weights_ == nullptr) {
        return Status::Internal(fmt::format(
            "model '{}': a CPU instance was asked for but the config has no CPU instance group, "
            "so no CPU weights were made",
            plan_->model));
      }
      return mlp::CreateCpuInstance(plan_, cpu_weights_, server_, info);
    }
#if VRAMD_WITH_CUDA
    VRAMD_ASSIGN_OR_RETURN(mlp::GpuDevice device, GpuDeviceFor(info.device_id));
    return mlp::CreateGpuInstance(plan_, device, server_, info);
#else
    return Status::Unavailable(fmt::format(
        "model '{}': instance '{}' asks for GPU {}, but this server was built without CUDA",
        plan_->model, info.name != nullptr ? info.name : "", info.device_id));
#endif
  }

 private:
#if VRAMD_WITH_CUDA
  // The weights and cuBLAS handle on `device`, made by the first caller for that device, whose
  // copy is recorded as a phase of the load in progress.
  Result<mlp::GpuDevice> GpuDeviceFor(int device) {
    std::lock_guard lock(mu_);
    if (auto it = gpu_devices_.find(device); it != gpu_devices_.end()) return it->second;
    if (gpu_devices_.empty() && !gpu_image_) {
      return Status::Internal(fmt::format(
          "model '{}': a GPU instance was asked for but the config has no KIND_GPU instance "
          "group, so no weights were staged for a GPU",
          plan_->model));
    }
    // The weights belong to the version (owner_), not to the instance being created.
    auto weights = gpu_devices_.empty()
                       ? mlp::UploadGpuWeights(gpu_image_.data(), gpu_layout_, device, server_,
                                               owner_)
                       : mlp::CopyGpuWeights(*gpu_devices_.begin()->second.weights, device,
                                             server_, owner_);
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
  const VramdServerApi* const server_;  // valid until model_destroy returns
  const VramdOwner owner_;              // the version's
  const std::shared_ptr<const mlp::CpuWeights> cpu_weights_;  // null without CPU groups
  const mlp::PackedLayout gpu_layout_;  // the file's element size

  std::mutex mu_;
  abi::Allocation gpu_image_;  // guarded by mu_; pinned host, until the first GPU upload
#if VRAMD_WITH_CUDA
  std::map<int, mlp::GpuDevice> gpu_devices_;  // guarded by mu_
#endif
};

Result<std::unique_ptr<MlpModel>> MlpModel::Create(const VramdModelInfo& info) {
  const std::string name = info.name != nullptr ? info.name : "";
  if (info.server == nullptr || info.version_dir == nullptr) {
    return Status::Internal(fmt::format("model '{}': model_create called without a {}", name,
                                        info.server == nullptr ? "server API" : "version dir"));
  }
  const VramdServerApi* server = info.server;
  VRAMD_ASSIGN_OR_RETURN(config::ModelConfig config, abi::ModelConfigOf(info));
  VRAMD_ASSIGN_OR_RETURN(MlpPlan plan, mlp::PlanFromConfig(name, config, info.version_dir));
  auto file = ReadWeights(plan.weights_path, server);
  if (!file.ok()) {
    return file.status().WithContext(fmt::format("model '{}': weights", name));
  }
  VRAMD_RETURN_IF_ERROR(mlp::PlanLayers(*file, &plan));

  const size_t file_element = plan.weight_type == mlp::WeightType::kFp16 ? 2 : 4;
  mlp::PackedLayout gpu_layout = mlp::MakeLayout(plan, file_element);
  // host_stage: the host images made from the file (the CPU instances' FP32 weights, the GPU
  // upload's image), allocation and pinning included; its bytes are those images' sizes.
  const size_t staged_bytes = (plan.needs_cpu ? mlp::MakeLayout(plan, 4).total_bytes : 0) +
                              (plan.needs_gpu ? gpu_layout.total_bytes : 0);
  std::shared_ptr<const mlp::CpuWeights> cpu_weights;
  abi::Allocation gpu_image;
  {
    abi::LoadPhaseScope phase(server, "host_stage", staged_bytes);
    if (plan.needs_cpu) {
      VRAMD_ASSIGN_OR_RETURN(cpu_weights, mlp::MakeCpuWeights(*file, plan, server, info.owner));
    }
    if (plan.needs_gpu) {
      VRAMD_ASSIGN_OR_RETURN(gpu_image, AllocateStagingImage(server, gpu_layout.total_bytes,
                                                             info.owner, name));
      mlp::PackWeights(*file, plan, gpu_layout, static_cast<std::byte*>(gpu_image.data()));
    }
  }
  return std::make_unique<MlpModel>(std::make_shared<const MlpPlan>(std::move(plan)), server,
                                    info.owner, std::move(cpu_weights), std::move(gpu_layout),
                                    std::move(gpu_image));
}

}  // namespace

const VramdBackendApi* MlpBackendApi() {
  // GPU inputs: a client's CUDA shared memory reaches a GPU instance with no host copy (a CPU
  // instance copies it to the host itself).
  return abi::BackendApiFor<MlpModel>("mlp", /*supports_gpu=*/VRAMD_WITH_CUDA != 0,
                                      /*accepts_gpu_inputs=*/VRAMD_WITH_CUDA != 0);
}

}  // namespace vramd::backends
