#include "runtime/dynamic_batcher.h"

#include <algorithm>

#include "runtime/batch_assembly.h"

namespace vramd::runtime {

BatcherOptions BatcherOptions::From(const config::ModelConfig& config) {
  BatcherOptions o;
  o.max_batch_size = static_cast<uint64_t>(std::max(1, config.max_batch_size()));
  for (int size : config.dynamic_batching().preferred_batch_size()) {
    if (size > 0 && static_cast<uint64_t>(size) <= o.max_batch_size) o.preferred.push_back(size);
  }
  if (o.preferred.empty()) o.preferred.push_back(o.max_batch_size);
  std::sort(o.preferred.begin(), o.preferred.end());
  o.preferred.erase(std::unique(o.preferred.begin(), o.preferred.end()), o.preferred.end());
  o.max_queue_delay =
      std::chrono::microseconds(config.dynamic_batching().max_queue_delay_microseconds());
  return o;
}

BatchChoice ChooseBatch(const RequestQueue& queue, const BatcherOptions& options,
                        SchedulerClock::time_point now, bool flush) {
  const uint64_t max_preferred = options.preferred.back();
  const QueuedRequest& head = queue.At(0);
  size_t count = 0;
  uint64_t samples = 0;
  size_t best = 0;  // requests in the largest preferred prefix found; 0: none
  bool cannot_grow = false;
  while (count < queue.size()) {
    const QueuedRequest& next = queue.At(count);
    if (count > 0) {
      if (samples + next.batch_size > max_preferred && best == 0) best = count;
      if (samples + next.batch_size > options.max_batch_size ||
          !CanBatchTogether(*head.request, *next.request)) {
        cannot_grow = true;
        break;
      }
    }
    samples += next.batch_size;
    ++count;
    if (std::binary_search(options.preferred.begin(), options.preferred.end(), samples)) {
      best = count;
    }
  }

  const auto delay = options.max_queue_delay;
  const bool delay_exceeded = delay.count() > 0 && now - head.enqueued >= delay;
  if (best > 0 && !delay_exceeded) return {best};
  if (cannot_grow || samples >= max_preferred || delay_exceeded || delay.count() == 0 || flush) {
    return {count};
  }
  return {0, std::min(head.enqueued + delay, queue.ClosestDeadline())};
}

}  // namespace vramd::runtime
