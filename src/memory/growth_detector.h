// GrowthDetector: flags an owner whose live bytes rise across N consecutive observations, the
// staircase of a leak that grows by a little on every request (PROBLEM.md, part 2).
//
// The caller observes an owner after each request it served (an instance's live bytes, say).
// A rise is an observation strictly above the previous one; any observation that is not a rise
// resets the count. When the count reaches `threshold`, Observe returns a Growth once, and then
// again only after another `threshold` consecutive rises.
//
// Thread safety: safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "core/mutex.h"
#include "memory/ledger.h"

namespace vramd::memory {

struct Growth {
  OwnerId owner = kNoOwner;
  int consecutive_rises = 0;
  int64_t from_bytes = 0;  // live bytes before the first rise of the run
  int64_t to_bytes = 0;
};

class GrowthDetector {
 public:
  explicit GrowthDetector(int threshold);

  std::optional<Growth> Observe(OwnerId owner, int64_t live_bytes) EXCLUDES(mu_);
  // Drops what is known of `owner` (call when it closes).
  void Forget(OwnerId owner) EXCLUDES(mu_);
  int threshold() const { return threshold_; }

 private:
  struct Run {
    int64_t last = 0;
    int64_t start = 0;
    int rises = 0;
  };
  const int threshold_;
  Mutex mu_;
  std::unordered_map<OwnerId, Run> runs_ GUARDED_BY(mu_);
};

}  // namespace vramd::memory
