#include "runtime/inference_statistics.h"

namespace vramd::runtime {
namespace {

uint64_t NowMsSinceEpoch() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// Raises `target` to `value` if it is lower (a monotonic maximum without a lock).
void RaiseTo(std::atomic<uint64_t>& target, uint64_t value) {
  uint64_t seen = target.load(std::memory_order_relaxed);
  while (seen < value &&
         !target.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

const char* FailureReasonName(FailureReason reason) {
  switch (reason) {
    case FailureReason::kRejected: return "REJECTED";
    case FailureReason::kCanceled: return "CANCELED";
    case FailureReason::kBackend: return "BACKEND";
    case FailureReason::kOther: return "OTHER";
  }
  return "OTHER";
}

void InferenceStatistics::RecordSuccess(uint64_t request_ns, uint64_t queue_ns,
                                        uint64_t compute_input_ns, uint64_t compute_infer_ns,
                                        uint64_t compute_output_ns) {
  success_.Add(request_ns);
  latency_.Add(request_ns);
  queue_.Add(queue_ns);
  compute_input_.Add(compute_input_ns);
  compute_infer_.Add(compute_infer_ns);
  compute_output_.Add(compute_output_ns);
  RaiseTo(last_inference_ms_, NowMsSinceEpoch());
}

void InferenceStatistics::RecordFailure(uint64_t request_ns, FailureReason reason,
                                        StatusCode code) {
  fail_.Add(request_ns);
  if (code == StatusCode::kResourceExhausted) out_of_memory_.fetch_add(1, std::memory_order_relaxed);
  latency_.Add(request_ns);
  const auto index = static_cast<size_t>(reason);
  if (index < 4) fail_by_reason_[index].fetch_add(1, std::memory_order_relaxed);
  RaiseTo(last_inference_ms_, NowMsSinceEpoch());
}

void InferenceStatistics::RecordExecution(uint64_t batch_size, uint64_t compute_input_ns,
                                          uint64_t compute_infer_ns,
                                          uint64_t compute_output_ns) {
  execution_count_.fetch_add(1, std::memory_order_relaxed);
  inference_count_.fetch_add(batch_size, std::memory_order_relaxed);
  MutexLock lock(batch_mu_);
  BatchStat& stat = batch_stats_[batch_size];
  stat.batch_size = batch_size;
  stat.compute_input.count += 1;
  stat.compute_input.ns += compute_input_ns;
  stat.compute_infer.count += 1;
  stat.compute_infer.ns += compute_infer_ns;
  stat.compute_output.count += 1;
  stat.compute_output.ns += compute_output_ns;
}

void InferenceStatistics::AddLiveSequences(int64_t delta) {
  live_sequences_.fetch_add(delta, std::memory_order_relaxed);
}

void InferenceStatistics::RecordSequenceIdleRelease() {
  sequence_idle_releases_.fetch_add(1, std::memory_order_relaxed);
}

void InferenceStatistics::AddPending(int64_t delta) {
  pending_.fetch_add(delta, std::memory_order_relaxed);
}

InferenceStatsSnapshot InferenceStatistics::Snapshot() const {
  InferenceStatsSnapshot s;
  s.last_inference_ms = last_inference_ms_.load(std::memory_order_relaxed);
  s.inference_count = inference_count_.load(std::memory_order_relaxed);
  s.execution_count = execution_count_.load(std::memory_order_relaxed);
  s.success = success_.Load();
  s.fail = fail_.Load();
  s.queue = queue_.Load();
  s.compute_input = compute_input_.Load();
  s.compute_infer = compute_infer_.Load();
  s.compute_output = compute_output_.Load();
  for (size_t i = 0; i < 4; ++i) {
    s.fail_by_reason[i] = fail_by_reason_[i].load(std::memory_order_relaxed);
  }
  s.pending = pending_.load(std::memory_order_relaxed);
  s.live_sequences = live_sequences_.load(std::memory_order_relaxed);
  s.sequence_idle_releases = sequence_idle_releases_.load(std::memory_order_relaxed);
  MutexLock lock(batch_mu_);
  s.batch_stats.reserve(batch_stats_.size());
  for (const auto& [size, stat] : batch_stats_) s.batch_stats.push_back(stat);
  return s;
}

}  // namespace vramd::runtime
