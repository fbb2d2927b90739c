// How a model moves from its serving versions to new ones, decided before the load starts.
//
// Two policies (the names are TensorFlow Serving's):
//   - availability-preserving: the new versions load beside the old ones, which serve until
//     the new ones are ready and warmed up; then the switch is instant. Costs both copies'
//     memory for the length of the load.
//   - resource-preserving: the old versions drain and unload first (their memory verified
//     returned), then the new ones load. Needs no extra memory; requests that arrive in the gap
//     wait up to the model's unavailable wait and then get an "unavailable" error.
//
// "auto" (the default) takes availability-preserving when the predicted footprint of the new
// versions plus the headroom fits the free memory of every device they go to, and
// resource-preserving otherwise. A model picks its own policy with config.pbtxt parameters:
//   parameters { key: "vramd.reload_policy" value { string_value: "auto" } }  (or
//     "availability_preserving" / "resource_preserving")
//   parameters { key: "vramd.reload_unavailable_wait_ms" value { string_value: "5000" } }
//
// The footprint prediction: what the ledger measured for this model at its last successful
// load (live bytes of the new versions' owners by device, once loaded and warmed up), else the
// size of the selected version directories' files times kFileSizeFactor on every device the
// version's instances are placed on, by the placement the load itself makes
// (instance_placement.h; weights are loaded once per device and shared by its instances; the
// factor covers instance workspaces and framework scratch).
//
// Thread safety: these are values and pure functions, except DeviceFreeBytes (any thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/model_config.pb.h"
#include "core/status.h"
#include "memory/allocator.h"
#include "memory/device.h"
#include "memory/ledger.h"
#include "runtime/instance_placement.h"

namespace vramd::runtime {

enum class ReloadPolicy { kAvailabilityPreserving, kResourcePreserving };
enum class ReloadPolicyChoice { kAuto, kAvailabilityPreserving, kResourcePreserving };

std::string_view ReloadPolicyName(ReloadPolicy policy);  // "availability_preserving", ...

inline constexpr double kFileSizeFactor = 1.25;

// Bytes by device, keyed by Device::ToString() ("cpu", "cuda:0").
using DeviceBytes = std::map<std::string, int64_t>;

struct ReloadSettings {
  ReloadPolicyChoice choice = ReloadPolicyChoice::kAuto;
  // How long a request waits for a model in a resource-preserving gap before Unavailable.
  std::chrono::milliseconds unavailable_wait{5000};
  int64_t headroom_bytes = int64_t{256} << 20;
};

// `defaults` overridden by the config's vramd.reload_* parameters; InvalidArgument naming the
// parameter and the values it takes.
Result<ReloadSettings> ReloadSettingsFromConfig(const config::ModelConfig& config,
                                                const ReloadSettings& defaults);

struct Footprint {
  DeviceBytes bytes;
  // "what the ledger measured at the model's last load" / "file sizes (N MiB) x 1.25"
  std::string source;
};

// The prediction for loading `versions` of the model in `model_dir` with `config` (see the
// file comment). `measured` is the last load's measurement, if any; `target` the backend and
// GPUs the load will place on, so a CPU-only backend's KIND_AUTO model is predicted on the CPU.
// A config that cannot be placed (its load will be refused, naming why) is predicted on the CPU.
// REQUIRES: config normalized.
Footprint PredictFootprint(const config::ModelConfig& config,
                           const std::filesystem::path& model_dir,
                           const std::vector<int64_t>& versions,
                           const std::optional<DeviceBytes>& measured,
                           const PlacementTarget& target);

// Live bytes of `owners` and their descendants, by device.
DeviceBytes MeasureFootprint(const memory::Ledger& ledger,
                             const std::vector<memory::OwnerId>& owners);

struct ReloadDecision {
  ReloadPolicy policy = ReloadPolicy::kAvailabilityPreserving;
  std::string reason;  // for the log and the lifecycle history
};

// `free_bytes` answers how much a device could still give (an error: unknown, which counts as
// not fitting). With nothing serving, there is nothing to preserve: availability-preserving.
ReloadDecision ChooseReloadPolicy(const ReloadSettings& settings, const Footprint& predicted,
                                  bool serving,
                                  const std::function<Result<int64_t>(const std::string&)>& free_bytes);

// Free memory of a device ("cpu" or "cuda:N"), counting what `allocator`'s pool for it holds
// free (reusable without the system): for a GPU, cudaMemGetInfo's free; for the CPU,
// /proc/meminfo's MemAvailable. No more than the server's budget there leaves (--memory-budget,
// the ledger of `allocator`), where there is one.
Result<int64_t> DeviceFreeBytes(const std::string& device, memory::Allocator* allocator);
Result<int64_t> DeviceFreeBytes(memory::Device device, const memory::Allocator* allocator);

}  // namespace vramd::runtime
