// LogSettings: Triton's logging extension, one object for both front ends (HTTP
// GET/POST /v2/logging, gRPC LogSettings): log_file, log_info, log_warning, log_error,
// log_verbose_level and log_format. The command line sets them (cli/triton_flags.h); each may
// change while the server runs:
//   - log_info / log_warning / log_error / log_verbose_level: the level threshold
//     (core/log_format.h's LogLevelFor; vramd logs debug lines at verbose level 1 and over);
//   - log_format: "default" or "ISO8601" (UTC), for every line from then on;
//   - log_file: where lines go from then on, through the one sink every logger writes to (a
//     spdlog dist_sink; the file is opened before the switch, so a path that cannot be opened
//     changes nothing). A client names the file, so it is confined: only a file in the folder of
//     the start-up --log-file (no "..", no other folder), or "" for standard error; a server
//     that started on standard error keeps it (its operator gave no folder for logs).
//
// Thread safety: every method may be called concurrently; logging meanwhile is safe (the sink
// and the formatter are switched under spdlog's own locks).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"

namespace spdlog::sinks {
template <typename Mutex>
class dist_sink;
}  // namespace spdlog::sinks

namespace vramd::logging {

struct LogState {
  std::string file;  // "": standard error
  std::string format = "default";
  bool info = true;
  bool warning = true;
  bool error = true;
  uint32_t verbose_level = 0;
};

// Opens the server's log as `startup` says (standard error, or the file, appended to, each line
// flushed as written), sets it as spdlog's default logger with the format and level, and
// returns the sink LogSettings switches. Fails naming the file when it cannot be opened.
using LogSink = spdlog::sinks::dist_sink<std::mutex>;
Result<std::shared_ptr<LogSink>> StartServerLog(const LogState& startup);

class LogSettings {
 public:
  // `sink`: the server's (StartServerLog); null (tests): log_file cannot change.
  LogSettings(LogState startup, std::shared_ptr<LogSink> sink);

  using Value = std::variant<bool, uint32_t, std::string>;
  // All or nothing: every change is checked (and a new file opened) before any applies.
  // InvalidArgument for an unknown setting, a value of the wrong type (naming it and the type it
  // takes), an unknown format, a file outside the log folder or one that cannot be opened;
  // Unsupported for a log_file change on a server without a log folder.
  Status Update(const std::vector<std::pair<std::string, Value>>& changes) EXCLUDES(mu_);
  LogState Current() const EXCLUDES(mu_);

 private:
  const std::shared_ptr<LogSink> sink_;
  // The start-up --log-file's folder; empty when the server started on standard error.
  const std::filesystem::path folder_;
  mutable Mutex mu_;
  LogState state_ GUARDED_BY(mu_);
};

}  // namespace vramd::logging
