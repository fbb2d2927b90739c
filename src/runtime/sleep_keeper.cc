#include "runtime/sleep_keeper.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

#include "runtime/loaded_model.h"

namespace vramd::runtime {

namespace {

using Clock = SleepGate::Clock;

// How long the keeper waits when no version has an idle time: it is poked when that changes.
constexpr auto kNothingDue = std::chrono::hours(1);

}  // namespace

SleepKeeper::SleepKeeper(ListVersions list, const memory::Ledger* ledger)
    : list_(std::move(list)), ledger_(ledger), thread_([this](std::stop_token stop) {
        Run(std::move(stop));
      }) {}

SleepKeeper::~SleepKeeper() {
  thread_.request_stop();
  thread_ = std::jthread();
}

void SleepKeeper::Poke() {
  MutexLock lock(mu_);
  dirty_ = true;
  poked_.notify_all();
}

void SleepKeeper::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    auto next = Clock::now() + kNothingDue;
    for (const auto& version : list_()) {
      const auto& after = version->sleep_settings().after_idle;
      const SleepGate& gate = version->sleep_gate();
      if (!after) continue;
      if (gate.state() != SleepGate::State::kAwake) {
        // A request may wake it, which does not poke the keeper: look again within its idle
        // time, so that it sleeps at most twice that after its last request.
        next = std::min(next, Clock::now() + *after);
        continue;
      }
      const auto due = gate.last_used() + *after;
      if (due <= Clock::now()) {
        if (version->TrySleepIfIdle(version->sleep_settings().level)) {
          ++idle_sleeps_;
          spdlog::info("model '{}' version {} slept after {} ms without a request",
                       version->name(), version->version(), after->count());
        }
        // Asleep now (a request may wake it: look again within its idle time), or busy (its
        // next idle stretch starts when the execution ends).
        next = std::min(next, Clock::now() + *after);
        continue;
      }
      next = std::min(next, due);
    }
    MutexLock lock(mu_);
    lock.WaitUntil(poked_, stop, next, [this]() REQUIRES(mu_) { return dirty_; });
    dirty_ = false;
  }
}

bool SleepKeeper::Relieve(memory::Device device, size_t size, memory::OwnerId asking) {
  const std::string asker = ledger_->OwnerPath(asking);
  std::vector<std::shared_ptr<LoadedModel>> candidates;
  for (auto& version : list_()) {
    if (!version->CanSleep() || !version->UsesDevice(device)) continue;
    if (version->sleep_gate().state() != SleepGate::State::kAwake) continue;
    // Not the model that asks: its other versions serve it while it loads or wakes.
    const std::string model = ledger_->OwnerPath(version->model_owner()) + "/";
    if (asker.compare(0, model.size(), model) == 0) continue;
    candidates.push_back(std::move(version));
  }
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    return a->sleep_gate().last_used() < b->sleep_gate().last_used();
  });
  for (const auto& version : candidates) {
    if (version->TrySleepIfIdle(version->sleep_settings().level)) {
      ++pressure_sleeps_;
      spdlog::info("model '{}' version {} slept to make room for {} bytes on {} for {}",
                   version->name(), version->version(), size, device.ToString(), asker);
      return true;
    }
  }
  return false;
}

}  // namespace vramd::runtime
