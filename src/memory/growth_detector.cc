#include "memory/growth_detector.h"

namespace vramd::memory {

// A threshold below 1 would flag every observation or none; it is treated as 1.
GrowthDetector::GrowthDetector(int threshold) : threshold_(threshold < 1 ? 1 : threshold) {}

std::optional<Growth> GrowthDetector::Observe(OwnerId owner, int64_t live_bytes) {
  MutexLock lock(mu_);
  auto [it, first] = runs_.try_emplace(owner);
  Run& run = it->second;
  if (first) {  // nothing to compare with yet
    run = Run{live_bytes, live_bytes, 0};
    return std::nullopt;
  }
  if (live_bytes <= run.last) {  // not a rise: the run starts again from here
    run = Run{live_bytes, live_bytes, 0};
    return std::nullopt;
  }
  if (run.rises == 0) run.start = run.last;
  ++run.rises;
  run.last = live_bytes;
  // Flag at threshold, 2 * threshold, ...: once per `threshold` consecutive rises.
  if (run.rises % threshold_ != 0) return std::nullopt;
  return Growth{owner, run.rises, run.start, live_bytes};
}

void GrowthDetector::Forget(OwnerId owner) {
  MutexLock lock(mu_);
  runs_.erase(owner);
}

}  // namespace vramd::memory
