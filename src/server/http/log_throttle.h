// LogThrottle: lets one message of a kind through per period and counts the rest, so that a
// condition a client can cause on every request or accept (fd exhaustion, a handler that
// throws) cannot fill the disk or burn a core writing logs.
//
// Thread safety: Allow may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "core/mutex.h"

namespace vramd::http {

class LogThrottle {
 public:
  explicit LogThrottle(std::chrono::steady_clock::duration period) : period_(period) {}

  // Whether to log now; if so, how many messages were held back since the last one logged.
  std::optional<uint64_t> Allow() EXCLUDES(mu_) {
    const auto now = std::chrono::steady_clock::now();
    MutexLock lock(mu_);
    if (now < next_) {
      ++suppressed_;
      return std::nullopt;
    }
    next_ = now + period_;
    const uint64_t held_back = suppressed_;
    suppressed_ = 0;
    return held_back;
  }

 private:
  const std::chrono::steady_clock::duration period_;
  Mutex mu_;
  std::chrono::steady_clock::time_point next_ GUARDED_BY(mu_) = {};
  uint64_t suppressed_ GUARDED_BY(mu_) = 0;
};

}  // namespace vramd::http
