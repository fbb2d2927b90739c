// InferenceStatistics: the counters behind Triton's statistics extension
// (/v2/models/{m}/versions/{v}/stats) and its nv_inference_* metrics, for one model version.
//
// Meaning follows Triton (docs/protocol/extension_statistics.md):
//  - per request: success / fail {count, ns of the whole request, received to answered},
//    queue {count, ns waiting for an instance}, compute_input / compute_infer / compute_output
//    {count, ns of the execution that served it, each request charged the whole execution};
//  - per execution (a batch of one or more requests): execution_count += 1,
//    inference_count += the batch size (samples, the sum of the requests' batch dimensions, 1
//    for a model without batching), and batch_stats[batch size] adds the execution's
//    compute_input / compute_infer / compute_output {1, ns};
//  - pending: requests queued and not yet executing (a gauge).
//
// Thread safety: every method is safe from any thread; recording is lock-free or takes one
// short mutex (batch_stats).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "runtime/latency_histogram.h"

namespace vramd::runtime {

struct DurationStat {
  uint64_t count = 0;
  uint64_t ns = 0;
};

struct BatchStat {
  uint64_t batch_size = 0;
  DurationStat compute_input;
  DurationStat compute_infer;
  DurationStat compute_output;
};

// Why a request failed, as Triton's nv_inference_request_failure{reason} labels it.
enum class FailureReason { kRejected, kCanceled, kBackend, kOther };
const char* FailureReasonName(FailureReason reason);  // "REJECTED", "CANCELED", ...

struct InferenceStatsSnapshot {
  uint64_t last_inference_ms = 0;  // ms since the epoch of the last answered request; 0: none
  uint64_t inference_count = 0;
  uint64_t execution_count = 0;
  DurationStat success;
  DurationStat fail;
  DurationStat queue;
  DurationStat compute_input;
  DurationStat compute_infer;
  DurationStat compute_output;
  uint64_t fail_by_reason[4] = {0, 0, 0, 0};  // indexed by FailureReason
  int64_t pending = 0;
  std::vector<BatchStat> batch_stats;  // ascending batch size
  // Sequence models (runtime/sequence_batcher.h): sequences holding a slot or waiting for one,
  // and those released for idling past max_sequence_idle_microseconds.
  int64_t live_sequences = 0;
  uint64_t sequence_idle_releases = 0;
};

class InferenceStatistics {
 public:
  // One request answered with success. Durations in ns.
  void RecordSuccess(uint64_t request_ns, uint64_t queue_ns, uint64_t compute_input_ns,
                     uint64_t compute_infer_ns, uint64_t compute_output_ns);
  // One request answered with an error; `code` its status code (ResourceExhausted: out of
  // memory, a quota or budget refused it: counted in out_of_memory() too).
  void RecordFailure(uint64_t request_ns, FailureReason reason,
                     StatusCode code = StatusCode::kUnknown);
  // Requests that failed out of memory (a rollback rule reads it: rollback_rules.h).
  uint64_t out_of_memory() const { return out_of_memory_.load(std::memory_order_relaxed); }
  // One execution of `batch_size` samples.
  void RecordExecution(uint64_t batch_size, uint64_t compute_input_ns, uint64_t compute_infer_ns,
                       uint64_t compute_output_ns) EXCLUDES(batch_mu_);
  void AddPending(int64_t delta);
  void AddLiveSequences(int64_t delta);
  void RecordSequenceIdleRelease();

  InferenceStatsSnapshot Snapshot() const EXCLUDES(batch_mu_);
  // Every answered request's duration, success or failure (a rollback rule's p99).
  const LatencyHistogram& latency() const { return latency_; }

 private:
  struct AtomicDuration {
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> ns{0};
    void Add(uint64_t n) {
      count.fetch_add(1, std::memory_order_relaxed);
      ns.fetch_add(n, std::memory_order_relaxed);
    }
    DurationStat Load() const {
      return {count.load(std::memory_order_relaxed), ns.load(std::memory_order_relaxed)};
    }
  };

  std::atomic<uint64_t> last_inference_ms_{0};
  std::atomic<uint64_t> inference_count_{0};
  std::atomic<uint64_t> execution_count_{0};
  AtomicDuration success_, fail_, queue_, compute_input_, compute_infer_, compute_output_;
  std::atomic<uint64_t> fail_by_reason_[4] = {};
  std::atomic<int64_t> pending_{0};
  std::atomic<int64_t> live_sequences_{0};
  std::atomic<uint64_t> sequence_idle_releases_{0};
  LatencyHistogram latency_;
  std::atomic<uint64_t> out_of_memory_{0};
  mutable Mutex batch_mu_;
  std::map<uint64_t, BatchStat> batch_stats_ GUARDED_BY(batch_mu_);
};

}  // namespace vramd::runtime
