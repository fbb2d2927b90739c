#include "server/logging/log_settings.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/log_format.h"

namespace vramd::logging {
namespace {

template <typename T>
const T* As(const LogSettings::Value& v) {
  return std::get_if<T>(&v);
}

}  // namespace

Status LogSettings::Update(const std::vector<std::pair<std::string, Value>>& changes) {
  MutexLock lock(mu_);
  std::optional<uint32_t> verbose;
  for (const auto& [name, value] : changes) {
    auto fixed = [&, name = name](std::string_view flag) {
      return Status::Unsupported(fmt::format(
          "log setting '{}': set at start-up ({}); vramd does not change it while running", name,
          flag));
    };
    if (name == "log_verbose_level") {
      const uint32_t* v = As<uint32_t>(value);
      if (v == nullptr) {
        return Status::InvalidArgument(
            "log setting 'log_verbose_level' must be a non-negative integer");
      }
      verbose = *v;
    } else if (name == "log_info" || name == "log_warning" || name == "log_error") {
      const bool* v = As<bool>(value);
      if (v == nullptr) {
        return Status::InvalidArgument(fmt::format("log setting '{}' must be a boolean", name));
      }
      const bool now = name == "log_info" ? state_.info : name == "log_warning" ? state_.warning
                                                                                : state_.error;
      if (*v != now) return fixed(fmt::format("--{}", std::string(name).replace(0, 4, "log-")));
    } else if (name == "log_format" || name == "log_file") {
      const std::string* v = As<std::string>(value);
      if (v == nullptr) {
        return Status::InvalidArgument(fmt::format("log setting '{}' must be a string", name));
      }
      const std::string& now = name == "log_format" ? state_.format : state_.file;
      if (*v != now) return fixed(name == "log_format" ? "--log-format" : "--log-file");
    } else {
      return Status::InvalidArgument(fmt::format("unknown log setting '{}'", name));
    }
  }
  if (verbose) {
    state_.verbose_level = *verbose;
    spdlog::set_level(LogLevelFor(*verbose > 0, state_.info, state_.warning, state_.error));
  }
  return Status::Ok();
}

LogState LogSettings::Current() const {
  MutexLock lock(mu_);
  return state_;
}

}  // namespace vramd::logging
