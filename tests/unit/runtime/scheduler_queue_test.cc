// The queue policy (limits, timeouts, REJECT / DELAY) and the dynamic batcher's decision, as
// pure functions of the queue and a clock chosen by the test: no threads, no sleeps.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dynamic_batcher.h"
#include "runtime/request_queue.h"

namespace vramd::runtime {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
const SchedulerClock::time_point kT0 = SchedulerClock::time_point() + std::chrono::hours(1);

// A request of `rows` samples of shape [rows, width], tagged by its id.
QueuedRequest Queued(std::string id, int64_t rows = 1, int64_t width = 2,
                     uint64_t timeout_us = 0, SchedulerClock::time_point at = kT0) {
  auto r = std::make_shared<InferRequest>();
  r->id = std::move(id);
  r->timeout_us = timeout_us;
  r->inputs.push_back(Tensor{"INPUT0", DataType::kInt32, {rows, width},
                             SharedBuffer::Allocate(rows * width * sizeof(int32_t))});
  QueuedRequest q;
  q.request = std::move(r);
  q.batch_size = static_cast<uint64_t>(rows);
  q.arrival = at;
  q.enqueued = at;
  return q;
}

std::vector<std::string> Ids(const std::vector<QueuedRequest>& requests) {
  std::vector<std::string> ids;
  for (const auto& r : requests) ids.push_back(r.request->id);
  return ids;
}

std::vector<std::string> Ids(const RequestQueue& queue) {
  std::vector<std::string> ids;
  for (size_t i = 0; i < queue.size(); ++i) ids.push_back(queue.At(i).request->id);
  return ids;
}

TEST(RequestQueueTest, PolicyComesFromTheConfig) {
  config::ModelQueuePolicy p;
  p.set_max_queue_size(3);
  p.set_default_timeout_microseconds(500);
  p.set_allow_timeout_override(true);
  p.set_timeout_action(config::ModelQueuePolicy::DELAY);
  const auto policy = RequestQueue::PolicyFrom(p);
  EXPECT_EQ(policy.max_queue_size, 3u);
  EXPECT_EQ(policy.default_timeout, microseconds(500));
  EXPECT_TRUE(policy.allow_timeout_override);
  EXPECT_TRUE(policy.delay_on_timeout);
}

TEST(RequestQueueTest, FullAtMaxQueueSizeAndNeverWhenZero) {
  RequestQueue limited({.max_queue_size = 2});
  limited.Push(Queued("a"), kT0);
  EXPECT_FALSE(limited.Full());
  limited.Push(Queued("b"), kT0);
  EXPECT_TRUE(limited.Full());

  RequestQueue unlimited;
  for (int i = 0; i < 1000; ++i) unlimited.Push(Queued("r"), kT0);
  EXPECT_FALSE(unlimited.Full());
}

TEST(RequestQueueTest, DeadlineIsTheDefaultOrAShorterAllowedOverride) {
  RequestQueue q({.default_timeout = microseconds(1000), .allow_timeout_override = true});
  q.Push(Queued("default"), kT0);
  q.Push(Queued("shorter", 1, 2, /*timeout_us=*/200), kT0);
  q.Push(Queued("longer", 1, 2, /*timeout_us=*/5000), kT0);  // may not increase it
  EXPECT_EQ(q.At(0).deadline, kT0 + microseconds(1000));
  EXPECT_EQ(q.At(1).deadline, kT0 + microseconds(200));
  EXPECT_EQ(q.At(2).deadline, kT0 + microseconds(1000));
  EXPECT_EQ(q.ClosestDeadline(), kT0 + microseconds(200));

  RequestQueue no_default({.allow_timeout_override = true});  // none is longer than any
  no_default.Push(Queued("own", 1, 2, 300), kT0);
  no_default.Push(Queued("none"), kT0);
  EXPECT_EQ(no_default.At(0).deadline, kT0 + microseconds(300));
  EXPECT_EQ(no_default.At(1).deadline, SchedulerClock::time_point::max());

  RequestQueue not_allowed({.default_timeout = microseconds(1000)});
  not_allowed.Push(Queued("own", 1, 2, 300), kT0);
  EXPECT_EQ(not_allowed.At(0).deadline, kT0 + microseconds(1000));

  RequestQueue no_policy;
  no_policy.Push(Queued("own", 1, 2, 300), kT0);
  EXPECT_EQ(no_policy.At(0).deadline, SchedulerClock::time_point::max());
  EXPECT_EQ(no_policy.ClosestDeadline(), SchedulerClock::time_point::max());
}

TEST(RequestQueueTest, RejectTakesOutOnlyExpiredRequests) {
  RequestQueue q({.default_timeout = microseconds(1000), .allow_timeout_override = true});
  q.Push(Queued("a"), kT0);
  q.Push(Queued("b", 1, 2, 100), kT0);
  q.Push(Queued("c"), kT0 + microseconds(500));
  EXPECT_TRUE(q.TakeExpired(kT0 + microseconds(99)).empty());
  EXPECT_EQ(Ids(q.TakeExpired(kT0 + microseconds(100))), (std::vector<std::string>{"b"}));
  EXPECT_EQ(Ids(q.TakeExpired(kT0 + microseconds(1200))), (std::vector<std::string>{"a"}));
  EXPECT_EQ(Ids(q), (std::vector<std::string>{"c"}));
}

TEST(RequestQueueTest, DelayMovesExpiredRequestsBehindFreshOnes) {
  RequestQueue q({.allow_timeout_override = true, .delay_on_timeout = true});
  q.Push(Queued("late", 1, 2, 100), kT0);
  q.Push(Queued("fresh1"), kT0);
  EXPECT_TRUE(q.TakeExpired(kT0 + milliseconds(1)).empty());  // DELAY rejects nothing
  q.Push(Queued("fresh2"), kT0 + milliseconds(1));
  EXPECT_EQ(Ids(q), (std::vector<std::string>{"fresh1", "fresh2", "late"}));
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(Ids(q.PopFront(2)), (std::vector<std::string>{"fresh1", "fresh2"}));
  EXPECT_EQ(Ids(q.PopFront(1)), (std::vector<std::string>{"late"}));
  EXPECT_TRUE(q.empty());
}

BatcherOptions Options(uint64_t max_batch, std::vector<uint64_t> preferred,
                       microseconds delay) {
  return BatcherOptions{max_batch, std::move(preferred), delay};
}

RequestQueue QueueOf(std::vector<QueuedRequest> requests) {
  RequestQueue q;
  for (auto& r : requests) {
    const auto at = r.enqueued;
    q.Push(std::move(r), at);
  }
  return q;
}

TEST(DynamicBatcherTest, OptionsDefaultThePreferredSizeToMaxBatchSize) {
  config::ModelConfig c;
  c.set_max_batch_size(16);
  c.mutable_dynamic_batching()->set_max_queue_delay_microseconds(250);
  auto o = BatcherOptions::From(c);
  EXPECT_EQ(o.max_batch_size, 16u);
  EXPECT_EQ(o.preferred, (std::vector<uint64_t>{16}));
  EXPECT_EQ(o.max_queue_delay, microseconds(250));

  c.mutable_dynamic_batching()->add_preferred_batch_size(8);
  c.mutable_dynamic_batching()->add_preferred_batch_size(4);
  EXPECT_EQ(BatcherOptions::From(c).preferred, (std::vector<uint64_t>{4, 8}));

  config::ModelConfig no_batch;  // max_batch_size 0: one request per execution
  no_batch.mutable_dynamic_batching();
  EXPECT_EQ(BatcherOptions::From(no_batch).max_batch_size, 1u);
  EXPECT_EQ(BatcherOptions::From(no_batch).preferred, (std::vector<uint64_t>{1}));
}

TEST(DynamicBatcherTest, RunsAPreferredSizeAsSoonAsItCanBeFormed) {
  auto q = QueueOf({Queued("a"), Queued("b"), Queued("c"), Queued("d"), Queued("e")});
  const auto o = Options(8, {2, 4}, milliseconds(100));
  EXPECT_EQ(ChooseBatch(q, o, kT0).count, 4u);  // the largest preferred size reachable
}

TEST(DynamicBatcherTest, WaitsForMoreUntilTheOldestHasWaitedTheDelay) {
  auto q = QueueOf({Queued("a"), Queued("b", 1, 2, 0, kT0 + milliseconds(3))});
  const auto o = Options(8, {4}, milliseconds(10));
  BatchChoice wait = ChooseBatch(q, o, kT0 + milliseconds(5));
  EXPECT_EQ(wait.count, 0u);
  EXPECT_EQ(wait.wake_at, kT0 + milliseconds(10));  // from the oldest's arrival
  EXPECT_EQ(ChooseBatch(q, o, kT0 + milliseconds(10)).count, 2u);  // then runs what it has
  EXPECT_EQ(ChooseBatch(q, o, kT0 + milliseconds(5), /*flush=*/true).count, 2u);
}

TEST(DynamicBatcherTest, ZeroDelayRunsWhateverIsQueuedAtOnce) {
  auto q = QueueOf({Queued("a"), Queued("b"), Queued("c")});
  EXPECT_EQ(ChooseBatch(q, Options(8, {8}, microseconds(0)), kT0).count, 3u);
}

TEST(DynamicBatcherTest, WakesForTheClosestRequestTimeout) {
  RequestQueue q({.default_timeout = milliseconds(4)});
  q.Push(Queued("a"), kT0);
  BatchChoice wait = ChooseBatch(q, Options(8, {8}, milliseconds(10)), kT0);
  EXPECT_EQ(wait.count, 0u);
  EXPECT_EQ(wait.wake_at, kT0 + milliseconds(4));
}

TEST(DynamicBatcherTest, NeverExceedsMaxBatchSizeCountingSamples) {
  auto q = QueueOf({Queued("a", 3), Queued("b", 3), Queued("c", 3)});
  // Preferred 6 is reached with a and b; c would make 9 > 8.
  EXPECT_EQ(ChooseBatch(q, Options(8, {6}, milliseconds(100)), kT0).count, 2u);
  // Without a preferred size reachable: stops at the largest that fits once the delay is over.
  EXPECT_EQ(ChooseBatch(q, Options(8, {8}, milliseconds(1)), kT0 + milliseconds(1)).count, 2u);
  // Adding b would pass the largest preferred size (4): run a alone rather than wait.
  EXPECT_EQ(ChooseBatch(q, Options(8, {4}, milliseconds(100)), kT0).count, 1u);
}

TEST(DynamicBatcherTest, StopsAtTheFirstRequestThatCannotShareTheBatch) {
  auto q = QueueOf({Queued("a", 1, 2), Queued("b", 1, 2), Queued("wide", 1, 3),
                    Queued("c", 1, 2)});
  // "wide" has another shape: the batch cannot grow past it, so it runs now without waiting.
  EXPECT_EQ(ChooseBatch(q, Options(8, {8}, milliseconds(100)), kT0).count, 2u);
  q.PopFront(2);
  EXPECT_EQ(ChooseBatch(q, Options(8, {8}, milliseconds(100)), kT0).count, 1u);  // "wide"
}

}  // namespace
}  // namespace vramd::runtime
