// Rollback rules: when a version that just went live is bad enough to go back (issue 18,
// docs/rollback.md). Values and a small state machine, with no clock or thread of their own:
// the caller feeds observations with their times and asks Check, so tests drive time.
//
// A model opts in with config.pbtxt parameters (all optional; any of them turns watching on):
//   vramd.rollback.watch_s         how long after going live a version is watched (300)
//   vramd.rollback.error_rate      errors over this share of requests ("5%" or "0.05") ...
//   vramd.rollback.error_window_s  ... over this many seconds (30)
//   vramd.rollback.p99_ms          p99 latency over this many ms over the same window
//   vramd.rollback.min_requests    fewer requests in the window decide nothing (20)
//   vramd.rollback.gpu_util        GPU utilization over this share ("95%") ...
//   vramd.rollback.gpu_util_s      ... for this many seconds running (10)
//   vramd.rollback.on_oom          any request of the version failed out of memory ("true")
//   vramd.rollback.on_leak         any leak report charged to the version ("true")
//   vramd.rollback.cooldown_s      after a rollback, no other for this long (600)
//   vramd.rollback.keep            what is kept of the versions a reload replaced: "warm"
//                                  (loaded, ready), "asleep" (loaded, asleep: sleep_gate.h) or
//                                  "reload" (unloaded; loaded again from their files) ("warm")
//   vramd.rollback.fallback_model  a model that answers for this one when a rule fires and
//                                  nothing can be put back (a first load, say)
// Windows slide by whole seconds; a rule needs its whole window behind it (a version live for
// 5 s is not judged on a 30 s window), which with min_requests keeps one early error from
// deciding.
//
// Thread safety: a RollbackWatch is used under its owner's lock; the rest are values.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "config/model_config.pb.h"
#include "core/status.h"
#include "runtime/latency_histogram.h"

namespace vramd::runtime {

// What a watch keeps of the versions a reload replaced, so that a rollback can put them back.
enum class RollbackKeep { kWarm, kAsleep, kReload };
const char* RollbackKeepName(RollbackKeep keep);  // "warm", "asleep", "reload"

struct RollbackSettings {
  bool enabled = false;
  std::chrono::seconds watch{300};
  std::optional<double> max_error_rate;  // a share, 0..1
  std::chrono::seconds window{30};
  std::optional<double> max_p99_ms;
  uint64_t min_requests = 20;
  std::optional<double> max_gpu_util;  // a share, 0..1
  std::chrono::seconds gpu_util_for{10};
  bool on_oom = true;
  bool on_leak = true;
  std::chrono::seconds cooldown{600};
  RollbackKeep keep = RollbackKeep::kWarm;
  std::string fallback_model;  // empty: none
};

// From the config's vramd.rollback.* parameters; InvalidArgument naming the parameter and what
// it takes.
Result<RollbackSettings> RollbackSettingsFromConfig(const config::ModelConfig& config);

// Why a rollback fired: the rule's name and its figures, for the log, the metric's label, the
// index reason and the lifecycle history.
struct RollbackVerdict {
  std::string rule;     // "error_rate", "p99_latency", "gpu_utilization", "oom", "leak"
  std::string figures;  // "12 of 40 requests failed (30.0% > 5.0%) over 30 s"
};

class RollbackWatch {
 public:
  using Clock = std::chrono::steady_clock;
  RollbackWatch(RollbackSettings settings, Clock::time_point live_since);

  const RollbackSettings& settings() const { return settings_; }
  // Whether `now` is still within the watch after going live.
  bool Watching(Clock::time_point now) const { return now - live_since_ < settings_.watch; }

  // The version's answered requests so far, as its statistics count them: the watch takes the
  // difference from the previous sample. The versions watched are new, so the first sample
  // counts from zero: requests answered before the first check count too.
  struct RequestSample {
    uint64_t requests = 0;
    uint64_t errors = 0;  // failed, cancellations aside
    uint64_t out_of_memory = 0;  // failed out of memory (a quota, the budget, the pool)
    LatencyHistogram::Counts latency{};
  };
  void OnSample(Clock::time_point now, const RequestSample& cumulative);
  void OnGpuUtilization(Clock::time_point now, double share);
  void OnOom(std::string what);
  void OnLeak(std::string what);

  // The first rule that fires now, if any, while watching.
  std::optional<RollbackVerdict> Check(Clock::time_point now);

 private:
  struct Second {
    int64_t index = 0;  // whole seconds since live_since_
    RequestSample counts;  // what arrived in that second
  };
  Second& SecondAt(Clock::time_point now);
  void DropBefore(int64_t first_index);

  const RollbackSettings settings_;
  const Clock::time_point live_since_;
  std::deque<Second> seconds_;  // oldest first, at most the window's
  RequestSample last_;  // the previous cumulative sample
  std::optional<Clock::time_point> gpu_over_since_;
  double gpu_last_share_ = 0;
  std::optional<RollbackVerdict> event_;  // an OOM or a leak, waiting for Check
};

}  // namespace vramd::runtime
