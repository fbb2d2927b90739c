// RequestQueue: the requests of one model version waiting for an instance, in arrival order,
// under the version's queue policy (Triton's ModelQueuePolicy):
//   - max_queue_size: Full() once that many wait (0: unlimited); the scheduler then rejects
//     the new request with Unavailable "Exceeds maximum queue size", as Triton does;
//   - default_timeout_microseconds / allow_timeout_override: each request gets a deadline at
//     Push; a request's own timeout (InferRequest::timeout_us) replaces the default only when
//     overriding is allowed and it is shorter (Triton: "may not increase the timeout"; a
//     default of 0, meaning none, is longer than any);
//   - timeout_action: TakeExpired removes expired requests for rejection (REJECT), or moves
//     them behind every fresh request (DELAY): a delayed request runs only once no fresh
//     request waits, so under sustained load it may wait long (as in Triton).
// The order seen through At() is fresh requests by arrival, then delayed ones by expiry.
//
// Thread safety: none; the scheduler keeps it under its mutex.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "config/model_config.pb.h"
#include "core/infer_request.h"
#include "runtime/infer_outcome.h"

namespace vramd::runtime {

using SchedulerClock = std::chrono::steady_clock;

// A request accepted by a LoadedModel, on its way to an instance.
struct QueuedRequest {
  std::shared_ptr<const InferRequest> request;  // validated against the model's config
  InferCallback done;
  // Samples it carries: its batch dimension (max_batch_size > 0), else 1.
  uint64_t batch_size = 1;
  SchedulerClock::time_point arrival;   // InferAsync was called: its duration starts here
  SchedulerClock::time_point enqueued;  // handed to the scheduler: its queue time starts here
  // When the queue policy gives up on it; max() when never.
  SchedulerClock::time_point deadline = SchedulerClock::time_point::max();
  // A filler the sequence batcher puts in a batch to keep the slots' positions (READY false):
  // run with the others, but not counted in the statistics, and its answer is dropped.
  bool null_request = false;
};

class RequestQueue {
 public:
  struct Policy {
    size_t max_queue_size = 0;  // 0: unlimited
    std::chrono::microseconds default_timeout{0};  // 0: none
    bool allow_timeout_override = false;
    bool delay_on_timeout = false;  // timeout_action DELAY; false: REJECT
  };
  static Policy PolicyFrom(const config::ModelQueuePolicy& policy);

  RequestQueue() = default;
  explicit RequestQueue(Policy policy) : policy_(policy) {}

  const Policy& policy() const { return policy_; }
  size_t size() const { return fresh_.size() + delayed_.size(); }
  bool empty() const { return size() == 0; }
  bool Full() const { return policy_.max_queue_size != 0 && size() >= policy_.max_queue_size; }

  // Appends `request`, setting its deadline from the policy. REQUIRES: !Full().
  void Push(QueuedRequest request, SchedulerClock::time_point now);

  // REQUIRES: index < size().
  const QueuedRequest& At(size_t index) const {
    return index < fresh_.size() ? fresh_[index] : delayed_[index - fresh_.size()];
  }

  // Removes the first `count` requests in At() order. REQUIRES: count <= size().
  std::vector<QueuedRequest> PopFront(size_t count);

  // Fresh requests whose deadline has passed at `now`: returned (REJECT) or moved behind the
  // fresh ones (DELAY, returning none).
  std::vector<QueuedRequest> TakeExpired(SchedulerClock::time_point now);

  // The earliest deadline among fresh requests; max() when none.
  SchedulerClock::time_point ClosestDeadline() const;

 private:
  Policy policy_;
  std::deque<QueuedRequest> fresh_;
  std::deque<QueuedRequest> delayed_;
};

}  // namespace vramd::runtime
