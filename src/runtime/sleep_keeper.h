// SleepKeeper: the sleeps vramd decides by itself (docs/memory.md, "Sleeping models").
//   - Idle time: a version whose config sets vramd.sleep_after_idle sleeps once it has run
//     nothing for that long. A thread of the keeper's waits until the earliest such moment
//     among the versions (or a Poke, when versions change), sleeps those due, and waits again.
//   - Memory pressure: Relieve, called by the allocator when a load or a wake cannot get memory
//     on a device (memory/allocator.h, SetPressureRelief), puts to sleep the least recently
//     used idle version that uses that device and belongs to another model.
// Both sleep only versions that are awake with no execution in flight (TrySleepIfIdle), at the
// level their config names, so neither waits on other models' executions.
//
// Thread safety: every method is safe from any thread.
#pragma once

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <stop_token>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "memory/allocator.h"
#include "memory/device.h"
#include "memory/ledger.h"

namespace vramd::runtime {

class LoadedModel;

class SleepKeeper final : public memory::Allocator::PressureRelief {
 public:
  // The versions that serve now (ModelManager::LoadedVersions); `ledger` names owners.
  using ListVersions = std::function<std::vector<std::shared_ptr<LoadedModel>>()>;
  SleepKeeper(ListVersions list, const memory::Ledger* ledger);
  ~SleepKeeper();  // stops and joins the thread
  SleepKeeper(const SleepKeeper&) = delete;
  SleepKeeper& operator=(const SleepKeeper&) = delete;

  // The versions changed (a load or unload): the idle deadlines are computed again.
  void Poke() EXCLUDES(mu_);

  // Puts one idle version using `device` that `asking` (an owner) is not part of to sleep,
  // the least recently used first; whether one went to sleep.
  bool Relieve(memory::Device device, size_t size, memory::OwnerId asking) override;

  // Idle sleeps and pressure sleeps so far.
  uint64_t idle_sleeps() const { return idle_sleeps_.load(); }
  uint64_t pressure_sleeps() const { return pressure_sleeps_.load(); }

 private:
  void Run(std::stop_token stop) EXCLUDES(mu_);

  const ListVersions list_;
  const memory::Ledger* const ledger_;
  std::atomic<uint64_t> idle_sleeps_{0};
  std::atomic<uint64_t> pressure_sleeps_{0};
  Mutex mu_;
  std::condition_variable_any poked_;  // waited on with mu_ and the thread's stop token
  bool dirty_ GUARDED_BY(mu_) = false;
  std::jthread thread_;  // last: starts once the rest is initialized
};

}  // namespace vramd::runtime
