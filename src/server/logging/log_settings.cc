#include "server/logging/log_settings.h"

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "core/log_format.h"

namespace vramd::logging {
namespace {

namespace fs = std::filesystem;

template <typename T>
const T* As(const LogSettings::Value& v) {
  return std::get_if<T>(&v);
}

// Messages quote client input (model names from URLs, bodies): the formatter escapes their
// control characters so that no request can start a log line (core/log_format.h).
std::unique_ptr<spdlog::formatter> Formatter(const std::string& format) {
  if (format == "ISO8601") return MakeEscapingFormatter("%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ %v", true);
  return MakeEscapingFormatter("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
}

Result<spdlog::sink_ptr> OpenSink(const std::string& file) {
  if (file.empty()) return spdlog::sink_ptr(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  try {
    return spdlog::sink_ptr(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file));
  } catch (const spdlog::spdlog_ex& e) {
    return Status::InvalidArgument(fmt::format("log file '{}' cannot be opened: {}", file, e.what()));
  }
}

}  // namespace

Result<std::shared_ptr<LogSink>> StartServerLog(const LogState& startup) {
  VRAMD_ASSIGN_OR_RETURN(spdlog::sink_ptr first, OpenSink(startup.file));
  auto sink = std::make_shared<LogSink>(std::vector<spdlog::sink_ptr>{std::move(first)});
  auto logger = std::make_shared<spdlog::logger>("vramd", sink);
  // Each line reaches a file as it is written, as on standard error: a log read while the
  // server runs (or after it is killed) is whole.
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(std::move(logger));
  spdlog::set_formatter(Formatter(startup.format));
  spdlog::set_level(LogLevelFor(startup.verbose_level > 0, startup.info, startup.warning,
                                startup.error));
  return sink;
}

LogSettings::LogSettings(LogState startup, std::shared_ptr<LogSink> sink)
    : sink_(std::move(sink)),
      folder_(startup.file.empty() ? fs::path()
                                   : fs::absolute(fs::path(startup.file)).parent_path()),
      state_(std::move(startup)) {}

Status LogSettings::Update(const std::vector<std::pair<std::string, Value>>& changes) {
  MutexLock lock(mu_);
  LogState next = state_;
  std::optional<spdlog::sink_ptr> new_sink;
  for (const auto& [name, value] : changes) {
    if (name == "log_verbose_level") {
      const uint32_t* v = As<uint32_t>(value);
      if (v == nullptr) {
        return Status::InvalidArgument(
            "log setting 'log_verbose_level' must be a non-negative integer");
      }
      next.verbose_level = *v;
    } else if (name == "log_info" || name == "log_warning" || name == "log_error") {
      const bool* v = As<bool>(value);
      if (v == nullptr) {
        return Status::InvalidArgument(fmt::format("log setting '{}' must be a boolean", name));
      }
      (name == "log_info" ? next.info : name == "log_warning" ? next.warning : next.error) = *v;
    } else if (name == "log_format") {
      const std::string* v = As<std::string>(value);
      if (v == nullptr || (*v != "default" && *v != "ISO8601")) {
        return Status::InvalidArgument(
            "log setting 'log_format' must be the string \"default\" or \"ISO8601\"");
      }
      next.format = *v;
    } else if (name == "log_file") {
      const std::string* v = As<std::string>(value);
      if (v == nullptr) {
        return Status::InvalidArgument("log setting 'log_file' must be a string");
      }
      if (*v == state_.file) continue;
      if (sink_ == nullptr || folder_.empty()) {
        return Status::Unsupported(
            "log setting 'log_file': this server logs to standard error (no --log-file at "
            "start-up), and a client may not choose where its log goes");
      }
      if (!v->empty()) {
        const fs::path wanted = fs::absolute(fs::path(*v)).lexically_normal();
        if (wanted.parent_path() != folder_.lexically_normal()) {
          return Status::InvalidArgument(fmt::format(
              "log setting 'log_file': '{}' is not a file in the folder of the start-up "
              "--log-file ('{}')",
              *v, folder_.string()));
        }
      }
      VRAMD_ASSIGN_OR_RETURN(spdlog::sink_ptr opened, OpenSink(*v));
      new_sink = std::move(opened);
      next.file = *v;
    } else {
      return Status::InvalidArgument(fmt::format("unknown log setting '{}'", name));
    }
  }
  if (new_sink) {
    spdlog::info("log continues in {}", next.file.empty() ? "standard error" : next.file);
    sink_->set_sinks({std::move(*new_sink)});
  }
  // The sink's formatter is set again after a switch: a new sink starts with spdlog's own.
  if (new_sink || next.format != state_.format) spdlog::set_formatter(Formatter(next.format));
  spdlog::set_level(LogLevelFor(next.verbose_level > 0, next.info, next.warning, next.error));
  state_ = std::move(next);
  return Status::Ok();
}

LogState LogSettings::Current() const {
  MutexLock lock(mu_);
  return state_;
}

}  // namespace vramd::logging
