// SleepGate: whether a version's executions may run, and its sleep and wake in between them
// (docs/memory.md, "Sleeping models").
//
// A version is awake, falling asleep, asleep or waking. Executions pass the gate (Enter) only
// while it is awake, and a sleep or wake runs only while none is inside: so a backend's Sleep
// and Wake never overlap an execute, which is the C ABI's promise (model_sleep).
//   - Enter on a sleeping version wakes it on the entering thread (the first to come; the
//     others wait for that wake): a request to a sleeping model waits, in its queue time, for
//     the wake. A failed wake leaves it asleep and fails that entry; the next entry tries again.
//   - Sleep stops new entries, waits for those inside to leave (up to a deadline: then it gives
//     up and the version stays awake), then calls the backend. TrySleepIfIdle sleeps only a
//     version that is awake with nothing inside, and never waits: memory pressure and the idle
//     timer use it from threads that must not wait on other models' executions.
//
// Thread safety: every method is safe from any thread. The backend's sleep and wake run with
// no lock held.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "backends/backend.h"
#include "core/mutex.h"
#include "core/status.h"

namespace vramd::runtime {

class SleepGate {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { kAwake, kFallingAsleep, kAsleep, kWaking };

  // What the gate calls to sleep and wake the version; `name` ("model 'm' version 1") is for
  // messages. An empty `sleep` makes a gate that never sleeps (Sleep answers Unsupported).
  struct Actions {
    std::string name;
    std::function<Status(backends::SleepLevel)> sleep;
    std::function<Status()> wake;
  };

  // Counters, for metrics: sleeps and wakes done, and the time they took.
  struct Counters {
    uint64_t sleeps = 0;
    uint64_t wakes = 0;
    uint64_t failed_wakes = 0;
    double sleep_seconds = 0;
    double wake_seconds = 0;
    double last_wake_seconds = 0;
  };

  explicit SleepGate(Actions actions);
  SleepGate(const SleepGate&) = delete;
  SleepGate& operator=(const SleepGate&) = delete;

  // Leaves the gate (marking the version used) when destroyed. Move-only.
  class Pass {
   public:
    Pass() = default;
    ~Pass();
    Pass(Pass&& other) noexcept : gate_(std::exchange(other.gate_, nullptr)) {}
    Pass& operator=(Pass&& other) noexcept;
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;

   private:
    friend class SleepGate;
    explicit Pass(SleepGate* gate) : gate_(gate) {}
    SleepGate* gate_ = nullptr;
  };

  // Before an execution: waits out a sleep or wake in progress, wakes a sleeping version, and
  // enters. The wake's error (named) when it failed. Free (no lock, last_used unchanged) for
  // a gate that cannot sleep, as state() is.
  Result<Pass> Enter() EXCLUDES(mu_);

  // Puts the version to sleep at `level`, waiting for the executions inside to leave until
  // `deadline` (new ones wait meanwhile): Unavailable naming how many are still running after
  // it, and the version stays awake. OK at once when it is asleep already; the backend's error
  // (the version stays awake) when its sleep fails.
  Status Sleep(backends::SleepLevel level, Clock::time_point deadline) EXCLUDES(mu_);
  // Sleep, only when awake with no execution inside and nothing in progress; true when it put
  // the version to sleep now.
  bool TrySleepIfIdle(backends::SleepLevel level) EXCLUDES(mu_);
  // Wakes a sleeping version (waits out a transition in progress); OK at once when awake.
  Status Wake() EXCLUDES(mu_);

  bool can_sleep() const { return static_cast<bool>(actions_.sleep); }
  State state() const EXCLUDES(mu_);
  backends::SleepLevel level() const EXCLUDES(mu_);  // the last sleep's
  // When the version was last left by an execution (or the gate made, or woken).
  Clock::time_point last_used() const EXCLUDES(mu_);
  // When the current sleep began; meaningful while asleep.
  Clock::time_point asleep_since() const EXCLUDES(mu_);
  Counters counters() const EXCLUDES(mu_);

 private:
  void Leave() EXCLUDES(mu_);
  // Run the backend's wake (the version asleep on entry) or sleep (falling asleep, nothing
  // inside) with mu_ released for the call, held before and after.
  Status WakeLocked() REQUIRES(mu_);
  Status SleepNowLocked(backends::SleepLevel level) REQUIRES(mu_);

  const Actions actions_;
  mutable Mutex mu_;
  std::condition_variable changed_;  // state_ or inside_ changed; waited on with mu_
  State state_ GUARDED_BY(mu_) = State::kAwake;
  backends::SleepLevel level_ GUARDED_BY(mu_) = backends::SleepLevel::kHostCopy;
  int inside_ GUARDED_BY(mu_) = 0;
  Clock::time_point last_used_ GUARDED_BY(mu_);
  Clock::time_point asleep_since_ GUARDED_BY(mu_);
  Counters counters_ GUARDED_BY(mu_);
};

// "awake", "falling asleep", "asleep", "waking".
const char* SleepStateName(SleepGate::State state);

}  // namespace vramd::runtime
