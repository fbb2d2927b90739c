#include "server/drain/drain.h"

#include <algorithm>

namespace vramd::server {

void Drain::RequestStarted() {
  in_flight_.fetch_add(1, std::memory_order_acq_rel);
  if (!draining()) return;
  MutexLock lock(mu_);
  last_start_ = Clock::now();
  changed_.notify_all();
}

void Drain::RequestEnded() {
  const uint64_t before = in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  if (!draining()) return;
  MutexLock lock(mu_);
  if (before == 1) last_idle_ = Clock::now();
  changed_.notify_all();
}

void Drain::Begin() {
  MutexLock lock(mu_);
  if (draining_.load(std::memory_order_relaxed)) return;
  last_idle_ = last_start_ = Clock::now();
  draining_.store(true, std::memory_order_release);
  changed_.notify_all();
}

Drain::Outcome Drain::BeginAndWait(std::chrono::milliseconds quiet,
                                   std::chrono::milliseconds timeout) {
  Begin();
  const auto begun = Clock::now();
  const auto deadline = begun + timeout;
  MutexLock lock(mu_);
  // Quiet once nothing is in flight and nothing has started or ended for `quiet`, measured
  // from this call too, so a drain asked twice waits its own window.
  auto quiet_since = [&]() REQUIRES(mu_) { return std::max({last_idle_, last_start_, begun}); };
  while (true) {
    const auto now = Clock::now();
    const bool idle = in_flight_.load(std::memory_order_acquire) == 0;
    if (idle && now - quiet_since() >= quiet) {
      return {true, 0, std::chrono::duration_cast<std::chrono::milliseconds>(now - begun)};
    }
    if (now >= deadline) {
      return {false, in_flight_.load(std::memory_order_acquire),
              std::chrono::duration_cast<std::chrono::milliseconds>(now - begun)};
    }
    // Woken by any start or end; otherwise at the earlier of the window's end and the deadline.
    const auto wake = idle ? std::min(deadline, quiet_since() + quiet) : deadline;
    lock.WaitUntil(changed_, wake);
  }
}

}  // namespace vramd::server
