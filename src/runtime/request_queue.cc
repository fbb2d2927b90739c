#include "runtime/request_queue.h"

#include <algorithm>

namespace vramd::runtime {

RequestQueue::Policy RequestQueue::PolicyFrom(const config::ModelQueuePolicy& policy) {
  Policy p;
  p.max_queue_size = policy.max_queue_size();
  p.default_timeout = std::chrono::microseconds(policy.default_timeout_microseconds());
  p.allow_timeout_override = policy.allow_timeout_override();
  p.delay_on_timeout = policy.timeout_action() == config::ModelQueuePolicy::DELAY;
  return p;
}

void RequestQueue::Push(QueuedRequest request, SchedulerClock::time_point now) {
  std::chrono::microseconds timeout = policy_.default_timeout;
  const auto own = std::chrono::microseconds(request.request->timeout_us);
  if (policy_.allow_timeout_override && own.count() > 0 &&
      (timeout.count() == 0 || own < timeout)) {
    timeout = own;
  }
  request.deadline =
      timeout.count() > 0 ? now + timeout : SchedulerClock::time_point::max();
  fresh_.push_back(std::move(request));
}

std::vector<QueuedRequest> RequestQueue::PopFront(size_t count) {
  std::vector<QueuedRequest> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    auto& from = fresh_.empty() ? delayed_ : fresh_;
    out.push_back(std::move(from.front()));
    from.pop_front();
  }
  return out;
}

std::vector<QueuedRequest> RequestQueue::TakeExpired(SchedulerClock::time_point now) {
  std::vector<QueuedRequest> rejected;
  if (ClosestDeadline() > now) return rejected;  // the common case: nothing to look at
  std::deque<QueuedRequest> kept;
  for (auto& r : fresh_) {
    if (r.deadline <= now) {
      if (policy_.delay_on_timeout) {
        r.deadline = SchedulerClock::time_point::max();  // delayed once, never rejected
        delayed_.push_back(std::move(r));
      } else {
        rejected.push_back(std::move(r));
      }
    } else {
      kept.push_back(std::move(r));
    }
  }
  fresh_.swap(kept);
  return rejected;
}

SchedulerClock::time_point RequestQueue::ClosestDeadline() const {
  auto closest = SchedulerClock::time_point::max();
  if (fresh_.empty()) return closest;
  if (!policy_.allow_timeout_override) return fresh_.front().deadline;  // pushed in order
  for (const auto& r : fresh_) closest = std::min(closest, r.deadline);
  return closest;
}

}  // namespace vramd::runtime
