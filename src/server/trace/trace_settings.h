// TraceSettings: Triton's trace extension settings (GET/POST /v2[/models/{m}]/trace/setting,
// the gRPC TraceSetting RPC, --trace-config) and the sampling decision they make on the
// request path.
//
// Settings, as Triton names and answers them (every value a string, trace_level a list):
//   trace_level    OFF or TIMESTAMPS (TENSORS is refused: vramd does not record tensors)
//   trace_rate     trace one request in every N (0: only requests that carry a traceparent)
//   trace_count    how many more traces to take; -1 without end. Counts down as traces are taken.
//   log_frequency  triton mode: write the trace file every N traces (0: at exit)
//   trace_file     triton mode: where traces are written
//   trace_mode     triton or opentelemetry; read-only while serving (--trace-config mode=...)
// A model's settings start as a copy of the global ones with the changes of its first update,
// as Triton's do; a setting given as null (HTTP) or with no value (gRPC) goes back to following
// the global value. An update with no setting changes nothing.
//
// Sampling: one counter per holder of settings (the global ones, each model's own). With
// tracing off everywhere the request path reads one atomic flag.
//
// Thread safety: every method from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"

namespace vramd::trace {

enum class TraceMode { kTriton, kOpenTelemetry };

class TraceSettings {
 public:
  // A setting's value as the protocols carry it: a list of strings (one for all but
  // trace_level); nullopt: clear (a model's setting goes back to the global one).
  using Value = std::optional<std::vector<std::string>>;
  using Changes = std::vector<std::pair<std::string, Value>>;

  struct Values {
    bool timestamps = false;  // trace_level TIMESTAMPS; false: OFF
    uint64_t rate = 1000;
    int64_t count = -1;
    uint64_t log_frequency = 0;
    std::string file;
  };

  explicit TraceSettings(TraceMode mode);  // the global settings at their defaults
  TraceSettings(TraceMode mode, Values global);

  TraceMode mode() const { return mode_; }

  // Applies `changes` to the global settings (model "") or to `model`'s. InvalidArgument,
  // naming the setting and what it takes, changes nothing.
  Status Update(std::string_view model, const Changes& changes) EXCLUDES(mu_);

  // The settings in effect for `model` ("": the global ones), as the protocols answer them:
  // name -> list of strings.
  std::vector<std::pair<std::string, std::vector<std::string>>> Answer(std::string_view model) const
      EXCLUDES(mu_);
  Values Effective(std::string_view model) const EXCLUDES(mu_);

  // The request path: whether to trace this request to `model`. A request that carries its
  // caller's trace context is traced whenever the level is on, whatever the rate and count
  // (as Triton's OpenTelemetry mode does). Takes one from the count.
  bool Sample(std::string_view model, bool has_parent) EXCLUDES(mu_);

  // Whether anything is traced at all (the global level or any model's).
  bool any_on() const { return any_on_.load(std::memory_order_relaxed); }

  // Parses one --trace-config flag value: "setting=value" (global: rate, level, count, mode)
  // or "triton,setting=value" (file, log-frequency) or "opentelemetry,setting=value" (url,
  // resource, bsp_*): the latter are returned as (mode-qualified name, value) for the tracer.
  struct FlagSetting {
    std::string mode;  // "", "triton" or "opentelemetry"
    std::string name;
    std::string value;
  };
  static Result<FlagSetting> ParseFlag(std::string_view text);

 private:
  struct Holder {
    Values values;  // its count is the count set; `remaining` counts down from it
    mutable std::atomic<int64_t> remaining{-1};
    // Which settings a model set itself; the rest follow the global values (unused globally).
    struct Own {
      bool level = true, rate = true, count = true, frequency = true, file = true;
    };
    Own own;
    mutable std::atomic<uint64_t> seen{0};
  };
  static Status Apply(const Changes& changes, Holder* holder, bool is_model);
  Values EffectiveLocked(const Holder* model) const REQUIRES_SHARED(mu_);
  void RefreshAnyOn() REQUIRES(mu_);

  const TraceMode mode_;
  mutable SharedMutex mu_;
  Holder global_ GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Holder>, std::less<>> models_ GUARDED_BY(mu_);
  std::atomic<bool> any_on_{false};
};

std::string_view TraceModeName(TraceMode mode);

}  // namespace vramd::trace
