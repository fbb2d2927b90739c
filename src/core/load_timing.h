// LoadTiming: where the time of one model load went, phase by phase, so that a reload can be
// explained ("1.2 s: 0.31 file_read, 0.02 h2d, ...") and compared with what the hardware allows.
//
// Phase names used across vramd (a backend may add its own):
//   file_read   reading model files from disk into host memory
//   host_stage  preparing host images for upload (packing, page-locking)
//   h2d         host-to-device copies of weights; `bytes` is what was copied
//   instances   creating the instances of the instance_group (beyond their h2d)
//   warmup      running the config's model_warmup requests
//   switch      publishing the new versions and retiring the old ones
// The same name recorded twice accumulates (seconds and bytes add up).
//
// Thread safety: every method is safe from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace vramd {

struct LoadPhase {
  std::string name;
  double seconds = 0;
  uint64_t bytes = 0;  // bytes moved in the phase, where that means something; else 0
  // The phase's first start and last end (a phase timed in several pieces, such as each
  // instance's creation, may overlap itself, so `seconds` can exceed end - start): a lifecycle
  // trace's span (server/trace/tracer.h).
  std::chrono::steady_clock::time_point start, end;
};

class LoadTiming {
 public:
  // A piece of phase `name` that took `seconds` and ended now.
  void Add(std::string_view name, double seconds, uint64_t bytes = 0) {
    const auto end = std::chrono::steady_clock::now();
    const auto start =
        end - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(seconds));
    std::lock_guard lock(mu_);
    for (auto& phase : phases_) {
      if (phase.name == name) {
        phase.seconds += seconds;
        phase.bytes += bytes;
        phase.start = std::min(phase.start, start);
        phase.end = std::max(phase.end, end);
        return;
      }
    }
    phases_.push_back({std::string(name), seconds, bytes, start, end});
  }

  // In the order each phase was first recorded.
  std::vector<LoadPhase> phases() const {
    std::lock_guard lock(mu_);
    return phases_;
  }

  // Times a scope as one phase: records the time from construction to destruction.
  // A null `timing` records nothing, so callers need not check.
  class Scope {
   public:
    Scope(LoadTiming* timing, std::string_view name, uint64_t bytes = 0)
        : timing_(timing), name_(name), bytes_(bytes), start_(std::chrono::steady_clock::now()) {}
    ~Scope() {
      if (timing_ == nullptr) return;
      const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
      timing_->Add(name_, elapsed.count(), bytes_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    LoadTiming* const timing_;
    const std::string_view name_;
    const uint64_t bytes_;
    const std::chrono::steady_clock::time_point start_;
  };

 private:
  mutable std::mutex mu_;
  std::vector<LoadPhase> phases_;  // guarded by mu_
};

}  // namespace vramd
