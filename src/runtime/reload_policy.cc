#include "runtime/reload_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>

#if VRAMD_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace vramd::runtime {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kPolicyParameter = "vramd.reload_policy";
constexpr std::string_view kWaitParameter = "vramd.reload_unavailable_wait_ms";

std::string MiB(int64_t bytes) { return fmt::format("{:.1f} MiB", bytes / 1048576.0); }

int64_t DirectoryBytes(const fs::path& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink,
                                           ec), end;
       !ec && it != end; it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const auto size = it->file_size(size_ec);
      if (!size_ec) total += static_cast<int64_t>(size);
    }
  }
  return total;
}

}  // namespace

std::string_view ReloadPolicyName(ReloadPolicy policy) {
  return policy == ReloadPolicy::kAvailabilityPreserving ? "availability_preserving"
                                                         : "resource_preserving";
}

Result<ReloadSettings> ReloadSettingsFromConfig(const config::ModelConfig& config,
                                                const ReloadSettings& defaults) {
  ReloadSettings settings = defaults;
  const auto& parameters = config.parameters();
  if (auto it = parameters.find(std::string(kPolicyParameter)); it != parameters.end()) {
    const std::string& value = it->second.string_value();
    if (value == "auto") {
      settings.choice = ReloadPolicyChoice::kAuto;
    } else if (value == "availability_preserving") {
      settings.choice = ReloadPolicyChoice::kAvailabilityPreserving;
    } else if (value == "resource_preserving") {
      settings.choice = ReloadPolicyChoice::kResourcePreserving;
    } else {
      return Status::InvalidArgument(fmt::format(
          "parameter '{}' is '{}'; it takes auto, availability_preserving or resource_preserving",
          kPolicyParameter, value));
    }
  }
  if (auto it = parameters.find(std::string(kWaitParameter)); it != parameters.end()) {
    const std::string& value = it->second.string_value();
    int64_t ms = -1;
    std::istringstream in(value);
    in >> ms;
    if (!in || !in.eof() || ms < 0) {
      return Status::InvalidArgument(fmt::format(
          "parameter '{}' is '{}'; it takes a number of milliseconds (0 or more)", kWaitParameter,
          value));
    }
    settings.unavailable_wait = std::chrono::milliseconds(ms);
  }
  return settings;
}

Footprint PredictFootprint(const config::ModelConfig& config, const fs::path& model_dir,
                           const std::vector<int64_t>& versions,
                           const std::optional<DeviceBytes>& measured,
                           const PlacementTarget& target) {
  if (measured.has_value()) return {*measured, "what the ledger measured at the model's last load"};
  int64_t files = 0;
  for (int64_t v : versions) files += DirectoryBytes(model_dir / std::to_string(v));
  const auto predicted = static_cast<int64_t>(static_cast<double>(files) * kFileSizeFactor);
  std::set<std::string> devices;
  if (auto plan = PlanInstances(config, target); plan.ok()) {
    for (const backends::InstanceContext& instance : *plan) {
      devices.insert(instance.kind == backends::DeviceKind::kGpu
                         ? memory::Device::Cuda(instance.device_id).ToString()
                         : memory::Device::Cpu().ToString());
    }
  }
  if (devices.empty()) devices.insert("cpu");
  Footprint footprint;
  footprint.source = fmt::format("file sizes ({}) x {}", MiB(files), kFileSizeFactor);
  for (const auto& device : devices) footprint.bytes[device] = predicted;
  return footprint;
}

DeviceBytes MeasureFootprint(const memory::Ledger& ledger,
                             const std::vector<memory::OwnerId>& owners) {
  DeviceBytes bytes;
  std::set<memory::OwnerId> inside(owners.begin(), owners.end());
  for (const auto& owner : ledger.Snapshot()) {  // parents come before their children
    if (inside.count(owner.id) == 0 && inside.count(owner.parent) == 0) continue;
    inside.insert(owner.id);
    for (const auto& [device, live] : owner.live_bytes_by_device) {
      bytes[device.ToString()] += live;
    }
  }
  return bytes;
}

ReloadDecision ChooseReloadPolicy(
    const ReloadSettings& settings, const Footprint& predicted, bool serving,
    const std::function<Result<int64_t>(const std::string&)>& free_bytes) {
  switch (settings.choice) {
    case ReloadPolicyChoice::kAvailabilityPreserving:
      return {ReloadPolicy::kAvailabilityPreserving, "chosen by the model's vramd.reload_policy"};
    case ReloadPolicyChoice::kResourcePreserving:
      return {ReloadPolicy::kResourcePreserving, "chosen by the model's vramd.reload_policy"};
    case ReloadPolicyChoice::kAuto:
      break;
  }
  if (!serving) return {ReloadPolicy::kAvailabilityPreserving, "no version serves"};
  if (predicted.bytes.empty()) {
    return {ReloadPolicy::kAvailabilityPreserving,
            fmt::format("the new versions are predicted to hold no memory ({})",
                        predicted.source)};
  }
  std::vector<std::string> fits;
  for (const auto& [device, bytes] : predicted.bytes) {
    const int64_t need = bytes + settings.headroom_bytes;
    auto free = free_bytes(device);
    if (!free.ok()) {
      return {ReloadPolicy::kResourcePreserving,
              fmt::format("free memory of {} is unknown ({})", device, free.status().message())};
    }
    if (need > *free) {
      return {ReloadPolicy::kResourcePreserving,
              fmt::format("{} needs {} ({} predicted from {}, + {} headroom) but has {} free",
                          device, MiB(need), MiB(bytes), predicted.source,
                          MiB(settings.headroom_bytes), MiB(*free))};
    }
    fits.push_back(fmt::format("{} needs {} with headroom, has {} free", device, MiB(need),
                               MiB(*free)));
  }
  return {ReloadPolicy::kAvailabilityPreserving,
          fmt::format("the new versions fit beside the old ({}; predicted from {})",
                      fmt::join(fits, ", "), predicted.source)};
}

Result<int64_t> DeviceFreeBytes(const std::string& device_name, memory::Allocator* allocator) {
  VRAMD_ASSIGN_OR_RETURN(memory::Device device, memory::Device::Parse(device_name));
  return DeviceFreeBytes(device, allocator);
}

namespace {

// What the device itself has free, and `allocator`'s pool holds free for it.
Result<int64_t> PhysicalFreeBytes(memory::Device device, const memory::Allocator* allocator) {
  int64_t pooled_free = 0;
  if (allocator != nullptr) {
    for (const auto& pool : allocator->PoolStatistics()) {
      if (pool.device == device) pooled_free += static_cast<int64_t>(pool.cached_free_bytes);
    }
  }
  if (device.type == memory::DeviceType::kCuda) {
#if VRAMD_WITH_CUDA
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = 0;
    size_t free = 0, total = 0;
    cudaError_t err = cudaSetDevice(device.index);
    if (err == cudaSuccess) err = cudaMemGetInfo(&free, &total);
    cudaSetDevice(previous);
    if (err != cudaSuccess) {
      return Status::Unavailable(fmt::format("cudaMemGetInfo on {}: {}", device.ToString(),
                                             cudaGetErrorString(err)));
    }
    return static_cast<int64_t>(free) + pooled_free;
#else
    return Status::Unavailable(
        fmt::format("{}: this server was built without CUDA", device.ToString()));
#endif
  }
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024 + pooled_free;
  }
  return Status::Unavailable("MemAvailable is not in /proc/meminfo");
}

}  // namespace

Result<int64_t> DeviceFreeBytes(memory::Device device, const memory::Allocator* allocator) {
  VRAMD_ASSIGN_OR_RETURN(int64_t free, PhysicalFreeBytes(device, allocator));
  if (allocator == nullptr) return free;
  // Under --memory-budget the server may use no more than the budget leaves, however much
  // the device has.
  const auto [held, limit] = allocator->ledger()->BudgetOf(device);
  if (limit > 0) free = std::min(free, std::max<int64_t>(0, limit - held));
  return free;
}

}  // namespace vramd::runtime
