// ReadinessProbe: asks a version's backend instances whether they can serve
// (BackendInstance::Ready), for the model ready endpoint, bounded in time.
//
// Triton's rules (python_backend's user model readiness, TRITONBACKEND_ModelInstanceReady):
//   - a version is ready when every instance is; the first that is not decides;
//   - an answer not given within the timeout (Triton's kUserModelReadinessTimeoutMs, 5 s) is
//     "not ready", and the caller gets it then, whatever the backend is still doing;
//   - one round at a time: a question asked while a round runs waits for that round (Triton's
//     next request reuses the IPC message in flight), so a backend that hangs is never asked
//     again until it returns, and never piles up calls.
// Rounds run on the probe's own thread, never on the caller's; a second thread of the probe
// answers the questions whose time ran out while a round still runs (both joined by the
// destructor). CheckAsync holds no thread of the caller's; Check waits on a future.
//
// Thread safety: Check may be called from any number of threads. REQUIRES: the destructor runs
// before whatever `round` uses goes (it waits for a round in flight).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"

namespace vramd::runtime {

class ReadinessProbe {
 public:
  // Triton's kUserModelReadinessTimeoutMs.
  static constexpr std::chrono::milliseconds kTimeout{5000};

  // `round` asks every instance, in order, and returns the first "not ready" (or OK).
  explicit ReadinessProbe(std::function<Status()> round);
  ~ReadinessProbe();
  ReadinessProbe(const ReadinessProbe&) = delete;
  ReadinessProbe& operator=(const ReadinessProbe&) = delete;

  // OK when ready; else why not: the backend's answer, or Unavailable "did not answer within
  // <timeout> ms" once `timeout` has passed. Starts a round unless one is running, which it
  // then waits for instead.
  Status Check(std::chrono::milliseconds timeout = kTimeout) EXCLUDES(mu_);

  // Check without waiting: `done` gets the answer exactly once, on one of the probe's threads
  // (or on this one, should the probe be stopping). `done` must not block for long.
  void CheckAsync(std::function<void(Status)> done, std::chrono::milliseconds timeout = kTimeout)
      EXCLUDES(mu_);

 private:
  struct Waiter {
    uint64_t round;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds timeout;
    std::function<void(Status)> done;
  };

  void Run(std::stop_token stop) EXCLUDES(mu_);
  void ExpireLate(std::stop_token stop) EXCLUDES(mu_);

  const std::function<Status()> round_;
  Mutex mu_;
  std::condition_variable_any wake_;  // a round asked for; with mu_ (and the stop token)
  std::condition_variable_any waiting_;  // a question with a deadline came; with mu_
  std::vector<Waiter> waiters_ GUARDED_BY(mu_);  // questions not yet answered
  uint64_t questions_ GUARDED_BY(mu_) = 0;       // questions asked, ever
  uint64_t asked_ GUARDED_BY(mu_) = 0;     // rounds asked for
  uint64_t started_ GUARDED_BY(mu_) = 0;   // rounds begun (the one running, if any)
  uint64_t finished_ GUARDED_BY(mu_) = 0;  // rounds done
  std::jthread timer_;   // ExpireLate
  std::jthread thread_;  // Run; last: starts once the rest is initialized
};

}  // namespace vramd::runtime
