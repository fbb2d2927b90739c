#include "runtime/sleep_settings.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <string>

namespace vramd::runtime {

Result<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format(
        "'{}' is not a duration ({}); write e.g. \"300s\", \"5m\", \"1500ms\" or \"1h\"", text,
        why));
  };
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.empty()) return bad("it is empty");
  size_t digits = 0;
  while (digits < text.size() &&
         ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) return bad("it does not start with a number");
  double value = 0;
  const std::string number(text.substr(0, digits));
  auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (error != std::errc() || end != number.data() + number.size()) {
    return bad("its number does not parse");
  }
  const std::string_view unit = text.substr(digits);
  double scale = 0;  // milliseconds per unit
  if (unit.empty() || unit == "s") {
    scale = 1000;
  } else if (unit == "ms") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60'000;
  } else if (unit == "h") {
    scale = 3'600'000;
  } else {
    return bad(fmt::format("unknown unit '{}'", unit));
  }
  const double ms = value * scale;
  // Ten years: beyond it a sleep timer means never, and the clock arithmetic would overflow.
  if (!std::isfinite(ms) || ms > 315'360'000'000.0) return bad("it is too long");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)));
}

Result<SleepSettings> SleepSettingsOfConfig(const config::ModelConfig& config) {
  SleepSettings settings;
  const auto& parameters = config.parameters();
  if (auto it = parameters.find(std::string(kSleepAfterIdleParameter)); it != parameters.end()) {
    settings.configured = true;
    auto idle = ParseDuration(it->second.string_value());
    if (!idle.ok()) {
      return idle.status().WithContext(fmt::format("parameter '{}'", kSleepAfterIdleParameter));
    }
    if (idle->count() > 0) settings.after_idle = *idle;
  }
  if (auto it = parameters.find(std::string(kSleepLevelParameter)); it != parameters.end()) {
    settings.configured = true;
    const std::string& value = it->second.string_value();
    if (value == "1") {
      settings.level = backends::SleepLevel::kHostCopy;
    } else if (value == "2") {
      settings.level = backends::SleepLevel::kDiscard;
    } else {
      return Status::InvalidArgument(fmt::format(
          "parameter '{}': '{}' is not a sleep level: \"1\" keeps what the model holds on "
          "devices in host memory, \"2\" reads it again from the model's files on wake",
          kSleepLevelParameter, value));
    }
  }
  return settings;
}

}  // namespace vramd::runtime
