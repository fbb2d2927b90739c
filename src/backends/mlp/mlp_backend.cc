#include "backends/mlp/mlp_backend.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
           std::shared_ptr<mlp::CpuWeights> cpu_weights, mlp::PackedLayout gpu_layout,
           abi::Allocation gpu_image)
      : plan_(std::move(plan)),
        server_(server),
        owner_(owner),
        cpu_weights_(std::move(cpu_weights)),
        gpu_layout_(std::move(gpu_layout)),
        gpu_image_(std::move(gpu_image)) {}

  // Sleeping: every copy of the weights leaves its device; the instances (workspaces, streams,
  // the cuBLAS handles) stay, and read the weights through the same GpuWeights and CpuWeights
  // objects, whose buffers Wake refills. Level 1 keeps one host image of the GPU weights
  // (pinned, charged to the version) that Wake uploads to each device; level 2 keeps nothing
  // and Wake reads the file again. CPU weights are host memory already, so a sleeping model
  // drops them at either level, and Wake reads them from the file.
  Status Sleep(int level) {
    std::lock_guard lock(mu_);
    if (asleep_) return Status::Ok();
#if VRAMD_WITH_CUDA
    if (level == 1 && !gpu_devices_.empty()) {
      const mlp::GpuWeights& first = *gpu_devices_.begin()->second.weights;
      VRAMD_ASSIGN_OR_RETURN(abi::Allocation image,
                             AllocateStagingImage(server_, first.layout.total_bytes, owner_,
                                                  plan_->model));
      VRAMD_RETURN_IF_ERROR(mlp::SaveGpuWeights(first, image.data()));
      gpu_image_ = std::move(image);
    }
    for (auto& [device, state] : gpu_devices_) state.weights->buffer.Reset();
#endif
    if (cpu_weights_ != nullptr) cpu_weights_->buffer.Reset();
    asleep_ = true;
    return Status::Ok();
  }

  Status Wake() {
    std::lock_guard lock(mu_);
    if (!asleep_) return Status::Ok();
    Status woken = WakeLocked();
    if (!woken.ok()) {
      // Still asleep: nothing stays on a device until the next try.
#if VRAMD_WITH_CUDA
      for (auto& [device, state] : gpu_devices_) state.weights->buffer.Reset();
#endif
      if (cpu_weights_ != nullptr) cpu_weights_->buffer.Reset();
      return woken.WithContext(fmt::format("model '{}': waking", plan_->model));
    }
    gpu_image_.Reset();
    asleep_ = false;
    return Status::Ok();
  }

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
  // Wake's work, under mu_: the file is read once when anything must come from it.
  Status WakeLocked() {
    std::optional<safetensors::File> file;
    bool gpu_from_file = false;
#if VRAMD_WITH_CUDA
    gpu_from_file = !gpu_devices_.empty() && !gpu_image_;
#endif
    if (cpu_weights_ != nullptr || gpu_from_file) {
      auto read = ReadWeights(plan_->weights_path, server_);
      if (!read.ok()) return read.status().WithContext("reading the weights again");
      file.emplace(std::move(read).value());
      // The images are packed with the plan made at load: a file that changed since would be
      // read out of its bounds.
      mlp::MlpPlan now = *plan_;
      now.layers.clear();
      Status same = mlp::PlanLayers(*file, &now);
      auto same_layers = [&] {
        if (now.weight_type != plan_->weight_type || now.layers.size() != plan_->layers.size()) {
          return false;
        }
        for (size_t i = 0; i < now.layers.size(); ++i) {
          const mlp::Layer& read = now.layers[i];
          const mlp::Layer& loaded = plan_->layers[i];
          if (read.in != loaded.in || read.out != loaded.out) {
            return false;
          }
        }
        return true;
      };
      if (same.ok() && !same_layers()) {
        same = Status::InvalidArgument("its layers differ from those loaded");
      }
      if (!same.ok()) {
        return same.WithContext(fmt::format(
            "{} changed since the model loaded, so it cannot wake from it (load the model again)",
            plan_->weights_path.string()));
      }
    }
    if (cpu_weights_ != nullptr) {
      VRAMD_ASSIGN_OR_RETURN(auto fresh, mlp::MakeCpuWeights(*file, *plan_, server_, owner_));
      cpu_weights_->buffer = std::move(fresh->buffer);
    }
#if VRAMD_WITH_CUDA
    if (gpu_from_file) {
      VRAMD_ASSIGN_OR_RETURN(gpu_image_, AllocateStagingImage(server_, gpu_layout_.total_bytes,
                                                              owner_, plan_->model));
      mlp::PackWeights(*file, *plan_, gpu_layout_, static_cast<std::byte*>(gpu_image_.data()));
    }
    for (auto& [device, state] : gpu_devices_) {
      VRAMD_RETURN_IF_ERROR(
          mlp::RestoreGpuWeights(*state.weights, gpu_image_.data(), server_, owner_));
    }
#endif
    return Status::Ok();
  }

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
  // Null without CPU groups; its buffer is empty while the model sleeps (guarded by mu_ then:
  // the instances read it only while the model is awake).
  const std::shared_ptr<mlp::CpuWeights> cpu_weights_;
  const mlp::PackedLayout gpu_layout_;  // the file's element size

  std::mutex mu_;
  // Guarded by mu_: pinned host, until the first GPU upload, and while asleep at level 1.
  abi::Allocation gpu_image_;
  bool asleep_ = false;  // guarded by mu_
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
  std::shared_ptr<mlp::CpuWeights> cpu_weights;
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
