// UnattributedAlarm: raised when a device's unattributed memory (memory_report.h) passes a
// threshold either way. Once what libraries take outside the pools is measured and charged to
// its owners (native_memory.h), what stays unattributed is an anomaly: an allocation that
// bypassed the allocator, or a library that grew outside every measured stretch. Too little
// (a negative figure past the threshold) is one too: memory charged twice, or a charge that
// outlived what it stood for.
//
// The memory report observes each device's figure whenever it is built (/v2/memory, /metrics,
// an out-of-memory message) and the model manager builds one after every load and unload, so
// the alarm is raised within a scrape of the anomaly. A device's alarm logs a warning when it
// is raised, with the figure, and an info line when it clears; `raised` counts the times.
//
// Thread safety: every method is safe from any thread.
#pragma once

#include <array>
#include <cstdint>

#include "core/mutex.h"

namespace vramd::memory {

class UnattributedAlarm {
 public:
  static constexpr int kMaxDevices = 64;
  static constexpr int64_t kDefaultThresholdBytes = 64LL << 20;

  // `threshold_bytes` 0: never raised.
  explicit UnattributedAlarm(int64_t threshold_bytes = kDefaultThresholdBytes)
      : threshold_bytes_(threshold_bytes) {}

  struct State {
    bool on = false;
    uint64_t raised = 0;  // times raised since start-up
  };
  // Takes device `ordinal`'s figure now; returns its state after it.
  State Observe(int ordinal, int64_t unattributed_bytes) EXCLUDES(mu_);
  State Current(int ordinal) const EXCLUDES(mu_);
  int64_t threshold_bytes() const { return threshold_bytes_; }

 private:
  const int64_t threshold_bytes_;
  mutable Mutex mu_;
  std::array<State, kMaxDevices> devices_ GUARDED_BY(mu_){};
};

}  // namespace vramd::memory
