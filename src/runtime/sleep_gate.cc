#include "runtime/sleep_gate.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace vramd::runtime {

namespace {

double SecondsSince(SleepGate::Clock::time_point start) {
  return std::chrono::duration<double>(SleepGate::Clock::now() - start).count();
}

}  // namespace

const char* SleepStateName(SleepGate::State state) {
  switch (state) {
    case SleepGate::State::kAwake: return "awake";
    case SleepGate::State::kFallingAsleep: return "falling asleep";
    case SleepGate::State::kAsleep: return "asleep";
    case SleepGate::State::kWaking: return "waking";
  }
  return "unknown";
}

SleepGate::SleepGate(Actions actions) : actions_(std::move(actions)) {
  last_used_ = Clock::now();
}

SleepGate::Pass::~Pass() {
  if (gate_ != nullptr) gate_->Leave();
}

SleepGate::Pass& SleepGate::Pass::operator=(Pass&& other) noexcept {
  if (this != &other) {
    if (gate_ != nullptr) gate_->Leave();
    gate_ = std::exchange(other.gate_, nullptr);
  }
  return *this;
}

Result<SleepGate::Pass> SleepGate::Enter() {
  // A version that cannot sleep is always awake: its requests take no lock here.
  if (!can_sleep()) return Pass();
  MutexLock lock(mu_);
  for (;;) {
    switch (state_) {
      case State::kAwake:
        ++inside_;
        return Pass(this);
      case State::kAsleep:
        VRAMD_RETURN_IF_ERROR(WakeLocked());
        break;
      case State::kFallingAsleep:
      case State::kWaking:
        lock.Wait(changed_);
        break;
    }
  }
}

void SleepGate::Leave() {
  MutexLock lock(mu_);
  --inside_;
  last_used_ = Clock::now();
  if (inside_ == 0) changed_.notify_all();
}

Status SleepGate::WakeLocked() {
  state_ = State::kWaking;
  const auto start = Clock::now();
  mu_.Unlock();  // the backend's wake runs unlocked; state_ (kWaking) keeps others out
  Status woken = actions_.wake();
  mu_.Lock();
  const double seconds = SecondsSince(start);
  if (woken.ok()) {
    state_ = State::kAwake;
    last_used_ = Clock::now();
    ++counters_.wakes;
    counters_.wake_seconds += seconds;
    counters_.last_wake_seconds = seconds;
    spdlog::info("{} woke in {:.3f} s", actions_.name, seconds);
  } else {
    state_ = State::kAsleep;
    ++counters_.failed_wakes;
    spdlog::warn("{} could not wake: {}", actions_.name, woken.message());
  }
  changed_.notify_all();
  return woken;
}

Status SleepGate::SleepNowLocked(backends::SleepLevel level) {
  // REQUIRES: state_ is kFallingAsleep and nothing is inside.
  const auto start = Clock::now();
  mu_.Unlock();  // as WakeLocked: kFallingAsleep keeps others out
  Status slept = actions_.sleep(level);
  mu_.Lock();
  const double seconds = SecondsSince(start);
  if (slept.ok()) {
    state_ = State::kAsleep;
    level_ = level;
    asleep_since_ = Clock::now();
    ++counters_.sleeps;
    counters_.sleep_seconds += seconds;
    spdlog::info("{} is asleep (level {}) after {:.3f} s", actions_.name,
                 static_cast<int>(level), seconds);
  } else {
    state_ = State::kAwake;
    spdlog::warn("{} could not sleep: {}", actions_.name, slept.message());
  }
  changed_.notify_all();
  return slept;
}

Status SleepGate::Sleep(backends::SleepLevel level, Clock::time_point deadline) {
  if (!can_sleep()) {
    return Status::Unsupported(fmt::format("{} cannot sleep", actions_.name));
  }
  MutexLock lock(mu_);
  for (;;) {
    if (state_ == State::kAsleep) return Status::Ok();
    if (state_ == State::kAwake) break;
    if (lock.WaitUntil(changed_, deadline) == std::cv_status::timeout) {
      return Status::Unavailable(fmt::format("{} is still {} after the sleep's wait",
                                             actions_.name, SleepStateName(state_)));
    }
  }
  state_ = State::kFallingAsleep;
  changed_.notify_all();
  while (inside_ > 0) {
    if (lock.WaitUntil(changed_, deadline) == std::cv_status::timeout && inside_ > 0) {
      state_ = State::kAwake;
      changed_.notify_all();
      return Status::Unavailable(fmt::format(
          "{} did not fall asleep: {} execution(s) still running when the wait ended",
          actions_.name, inside_));
    }
  }
  return SleepNowLocked(level);
}

bool SleepGate::TrySleepIfIdle(backends::SleepLevel level) {
  if (!can_sleep()) return false;
  MutexLock lock(mu_);
  if (state_ != State::kAwake || inside_ > 0) return false;
  state_ = State::kFallingAsleep;
  return SleepNowLocked(level).ok();
}

Status SleepGate::Wake() {
  MutexLock lock(mu_);
  for (;;) {
    switch (state_) {
      case State::kAwake:
        return Status::Ok();
      case State::kAsleep:
        return WakeLocked();
      case State::kFallingAsleep:
      case State::kWaking:
        lock.Wait(changed_);
        break;
    }
  }
}

SleepGate::State SleepGate::state() const {
  if (!can_sleep()) return State::kAwake;
  MutexLock lock(mu_);
  return state_;
}

backends::SleepLevel SleepGate::level() const {
  MutexLock lock(mu_);
  return level_;
}

SleepGate::Clock::time_point SleepGate::last_used() const {
  MutexLock lock(mu_);
  return last_used_;
}

SleepGate::Clock::time_point SleepGate::asleep_since() const {
  MutexLock lock(mu_);
  return asleep_since_;
}

SleepGate::Counters SleepGate::counters() const {
  MutexLock lock(mu_);
  return counters_;
}

}  // namespace vramd::runtime
