// LogSettings: Triton's logging extension, one object for both front ends (HTTP
// GET/POST /v2/logging, gRPC LogSettings): log_file, log_info, log_warning, log_error,
// log_verbose_level and log_format. The command line sets them (cli/triton_flags.h); while
// running, log_verbose_level changes (vramd logs debug lines at 1 and over), and the others
// accept their current value and refuse any other, naming the start-up flag: vramd writes one
// log, set up before any thread logs.
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"

namespace vramd::logging {

struct LogState {
  std::string file;  // "": standard error
  std::string format = "default";
  bool info = true;
  bool warning = true;
  bool error = true;
  uint32_t verbose_level = 0;
};

class LogSettings {
 public:
  explicit LogSettings(LogState startup) : state_(std::move(startup)) {}

  using Value = std::variant<bool, uint32_t, std::string>;
  // All or nothing: every change is checked before any applies. InvalidArgument for an unknown
  // setting or a value of the wrong type (naming it and the type it takes); Unsupported for a
  // setting fixed at start-up asked to change.
  Status Update(const std::vector<std::pair<std::string, Value>>& changes) EXCLUDES(mu_);
  LogState Current() const EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  LogState state_ GUARDED_BY(mu_);
};

}  // namespace vramd::logging
