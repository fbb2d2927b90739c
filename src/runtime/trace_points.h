// StampExecution: what the runtime adds to a traced request's record (core/request_trace.h)
// once its execution ends: the points only the runtime sees (arrival at the model, queue,
// compute) and the memory figures it measured. Called for requests that carry a trace only.
#pragma once

#include <cstdint>
#include <optional>

#include "core/infer_request.h"
#include "core/status.h"
#include "memory/ledger.h"
#include "runtime/memory_context.h"
#include "runtime/request_queue.h"

namespace vramd::runtime {

struct ExecutionTimes {
  SchedulerClock::time_point arrival;   // QueuedRequest::arrival
  SchedulerClock::time_point enqueued;  // QueuedRequest::enqueued
  SchedulerClock::time_point start;     // the execution began
  // Inputs assembled and the backend returned: unknown (nullopt) on the request-list path,
  // where the backend does both.
  std::optional<SchedulerClock::time_point> input_end;
  std::optional<SchedulerClock::time_point> output_start;
  SchedulerClock::time_point end;
};

// `batch_size` 0: not known. `instance_owner` and `request_owner` give the memory figures where known (kNoOwner, null:
// not measured).
void StampExecution(const InferRequest& request, int64_t version, uint64_t batch_size,
                    const ExecutionTimes& times, const MemoryContext& memory,
                    memory::OwnerId instance_owner, const memory::LazyOwner* request_owner,
                    const Status& status);

}  // namespace vramd::runtime
