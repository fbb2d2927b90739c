#include "runtime/instance_placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "memory/cuda_devices.h"

namespace vramd::runtime {
namespace {

using config::ModelInstanceGroup;

std::string DescribeGpus(const PlacementTarget& target) {
  return target.describe_gpus ? target.describe_gpus() : std::string();
}

// The GPUs `target` places on: none for a backend that runs on the CPU only.
int UsableGpus(const PlacementTarget& target) {
  return target.backend_supports_gpu ? target.visible_gpus : 0;
}

// KIND_AUTO resolved: KIND_GPU when there is a GPU to place on, else KIND_CPU.
ModelInstanceGroup::Kind PlacedKind(const ModelInstanceGroup& group, int gpus) {
  if (group.kind() != ModelInstanceGroup::KIND_AUTO) return group.kind();
  return gpus > 0 ? ModelInstanceGroup::KIND_GPU : ModelInstanceGroup::KIND_CPU;
}

std::string VisibleGpus(const PlacementTarget& target) {
  if (target.visible_gpus == 0) return "none";
  if (target.visible_gpus == 1) return "1 (GPU 0)";
  return fmt::format("{} (GPUs 0 to {})", target.visible_gpus, target.visible_gpus - 1);
}

}  // namespace

Result<std::vector<backends::InstanceContext>> PlanInstances(const config::ModelConfig& config,
                                                             const PlacementTarget& target) {
  std::vector<backends::InstanceContext> plan;
  const int gpus = UsableGpus(target);
  int index = 0;
  for (const ModelInstanceGroup& group : config.instance_group()) {
    const std::string where = fmt::format("instance_group '{}'", group.name());
    const auto kind = PlacedKind(group, gpus);
    if (kind == ModelInstanceGroup::KIND_CPU) {
      for (int i = 0; i < group.count(); ++i) {
        plan.push_back({fmt::format("{}_{}", group.name(), i), index++,
                        backends::DeviceKind::kCpu, -1});
      }
      continue;
    }
    if (kind != ModelInstanceGroup::KIND_GPU) {
      return Status::Unsupported(fmt::format("{}: kind {} is not supported", where,
                                             ModelInstanceGroup::Kind_Name(group.kind())));
    }
    if (!target.backend_supports_gpu) {
      return Status::InvalidArgument(fmt::format(
          "{}: kind is KIND_GPU but backend '{}' runs on the CPU only; make the kind KIND_CPU "
          "or KIND_AUTO",
          where, target.backend));
    }
    if (gpus == 0) {
      return Status::InvalidArgument(fmt::format(
          "{}: kind is KIND_GPU but this server sees no GPU ({})", where,
          DescribeGpus(target)));
    }
    std::vector<int> devices(group.gpus().begin(), group.gpus().end());
    if (devices.empty()) {
      for (int d = 0; d < gpus; ++d) devices.push_back(d);
    }
    for (int d : devices) {
      if (d < 0 || d >= gpus) {
        return Status::InvalidArgument(fmt::format(
            "{}: gpus lists GPU {}, which this server does not see; it sees {} ({})", where, d,
            VisibleGpus(target), DescribeGpus(target)));
      }
    }
    for (int i = 0; i < group.count(); ++i) {
      for (int d : devices) {
        plan.push_back({fmt::format("{}_{}_gpu{}", group.name(), i, d), index++,
                        backends::DeviceKind::kGpu, d});
      }
    }
  }
  if (plan.empty()) {
    plan.push_back({fmt::format("{}_0", config.name()), 0, backends::DeviceKind::kCpu, -1});
  }
  return plan;
}

config::ModelConfig ConfigAsPlaced(const config::ModelConfig& config,
                                   const PlacementTarget& target) {
  config::ModelConfig placed = config;
  const int gpus = UsableGpus(target);
  for (ModelInstanceGroup& group : *placed.mutable_instance_group()) {
    group.set_kind(PlacedKind(group, gpus));
    if (group.kind() == ModelInstanceGroup::KIND_GPU && group.gpus().empty()) {
      for (int d = 0; d < gpus; ++d) group.add_gpus(d);
    }
  }
  return placed;
}

std::vector<int> GpusOfPlan(const std::vector<backends::InstanceContext>& plan) {
  std::vector<int> gpus;
  for (const backends::InstanceContext& instance : plan) {
    if (instance.kind != backends::DeviceKind::kGpu) continue;
    if (std::find(gpus.begin(), gpus.end(), instance.device_id) == gpus.end()) {
      gpus.push_back(instance.device_id);
    }
  }
  return gpus;
}

PlacementTarget PlacementTargetFor(const backends::Backend& backend) {
  PlacementTarget target;
  target.backend = std::string(backend.name());
  target.backend_supports_gpu = backend.SupportsGpu();
  target.visible_gpus = target.backend_supports_gpu ? memory::CudaDeviceCount() : 0;
  target.describe_gpus = [] {
    std::string description = memory::CudaDescription();
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
      description += fmt::format("; CUDA_VISIBLE_DEVICES={}", visible);
    }
    return description;
  };
  return target;
}

}  // namespace vramd::runtime
