// The dynamic batcher's decision: given the queue, which requests run together now, or how
// long to wait for more. A pure function of the queue and the clock, so it is tested without
// threads; the scheduler calls it from whichever instance thread is idle.
//
// The rule follows Triton's DynamicBatchScheduler::GetDynamicBatch, for one priority level:
// scan the queue from its head, adding requests while the batch stays within max_batch_size
// and every request can share a batch with the head (batch_assembly.h), stopping at the first
// that cannot (requests never overtake each other). Then:
//   1. the scan reached a preferred batch size (or would pass the largest one) and the head
//      has waited less than max_queue_delay: run the largest such prefix;
//   2. the batch cannot grow (a request did not fit, or it reached the largest preferred
//      size), or the head has waited max_queue_delay, or the delay is 0: run all scanned;
//   3. otherwise wait until the head has waited max_queue_delay (or the closest request
//      timeout), or until a request arrives, and decide again.
// Without preferred_batch_size in the config, the only preferred size is max_batch_size, as
// Triton normalizes it; a model with max_batch_size 0 runs one request per execution.
//
// Thread safety: ChooseBatch is pure; BatcherOptions is a value.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "config/model_config.pb.h"
#include "runtime/request_queue.h"

namespace vramd::runtime {

struct BatcherOptions {
  uint64_t max_batch_size = 1;      // samples per execution; at least 1
  std::vector<uint64_t> preferred;  // ascending, not empty, none above max_batch_size
  std::chrono::microseconds max_queue_delay{0};

  // REQUIRES: config.has_dynamic_batching(), config validated.
  static BatcherOptions From(const config::ModelConfig& config);
};

struct BatchChoice {
  size_t count = 0;  // requests to take from the head now; 0: none yet
  // When count is 0: decide again then, or when a request arrives, whichever comes first.
  SchedulerClock::time_point wake_at = SchedulerClock::time_point::max();
};

// REQUIRES: !queue.empty(), and expired requests already taken out (TakeExpired).
// `flush`: do not wait (rule 3 becomes rule 2), for draining at shutdown.
BatchChoice ChooseBatch(const RequestQueue& queue, const BatcherOptions& options,
                        SchedulerClock::time_point now, bool flush = false);

}  // namespace vramd::runtime
