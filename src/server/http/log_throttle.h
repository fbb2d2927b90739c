// LogThrottle: lets one message of a kind through per period and counts the rest, so that a
// condition a client can cause on every request or accept (fd exhaustion, a handler that
// throws) cannot fill the disk or burn a core writing logs.
//
// Thread safety: Allow may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>

namespace vramd::http {

class LogThrottle {
 public:
  explicit LogThrottle(std::chrono::steady_clock::duration period) : period_(period) {}

  // Whether to log now; if so, how many messages were held back since the last one logged.
  std::optional<uint64_t> Allow() {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mu_);
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
  std::mutex mu_;
  std::chrono::steady_clock::time_point next_{};  // guarded by mu_
  uint64_t suppressed_ = 0;                       // guarded by mu_
};

}  // namespace vramd::http
