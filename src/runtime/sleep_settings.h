// A model's sleep settings, from vramd keys in its config's parameters (docs/memory.md,
// "Sleeping models"):
//   vramd.sleep_after_idle  how long the model may go without an execution before it sleeps:
//                           "300s", "5m", "1500ms", "1h" (a bare number is seconds); absent
//                           or "0": never by itself
//   vramd.sleep_level       "1" (default: what it holds on devices kept in host memory) or "2"
//                           (kept nothing; read again from the model's files on wake), for the
//                           sleeps vramd decides (idle time, memory pressure)
#pragma once

#include <chrono>
#include <optional>
#include <string_view>

#include "backends/backend.h"
#include "config/model_config.pb.h"
#include "core/status.h"

namespace vramd::runtime {

inline constexpr std::string_view kSleepAfterIdleParameter = "vramd.sleep_after_idle";
inline constexpr std::string_view kSleepLevelParameter = "vramd.sleep_level";

struct SleepSettings {
  std::optional<std::chrono::milliseconds> after_idle;  // nullopt: no idle sleep
  backends::SleepLevel level = backends::SleepLevel::kHostCopy;
  // Whether the config says anything about sleeping (then its backend must be able to).
  bool configured = false;
};

// InvalidArgument naming the parameter and its value when one does not parse.
Result<SleepSettings> SleepSettingsOfConfig(const config::ModelConfig& config);

// "1500ms", "2s", "5m", "1h", "30" (seconds); fractions allowed ("0.5s"). InvalidArgument for
// anything else, negative values included.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text);

}  // namespace vramd::runtime
