// InferenceStatistics: each Record* adds what inference_statistics.h says, and concurrent
// recording loses nothing.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "runtime/inference_statistics.h"

namespace vramd::runtime {
namespace {

TEST(InferenceStatisticsTest, StartsEmpty) {
  InferenceStatistics stats;
  const auto s = stats.Snapshot();
  EXPECT_EQ(s.last_inference_ms, 0u);
  EXPECT_EQ(s.inference_count, 0u);
  EXPECT_EQ(s.execution_count, 0u);
  EXPECT_EQ(s.success.count, 0u);
  EXPECT_EQ(s.fail.count, 0u);
  EXPECT_EQ(s.pending, 0);
  EXPECT_TRUE(s.batch_stats.empty());
}

TEST(InferenceStatisticsTest, SuccessAddsEveryDurationOnce) {
  InferenceStatistics stats;
  stats.RecordSuccess(1000, 100, 10, 500, 20);
  stats.RecordSuccess(3000, 300, 30, 1500, 60);
  const auto s = stats.Snapshot();
  EXPECT_EQ(s.success.count, 2u);
  EXPECT_EQ(s.success.ns, 4000u);
  EXPECT_EQ(s.queue.count, 2u);
  EXPECT_EQ(s.queue.ns, 400u);
  EXPECT_EQ(s.compute_input.ns, 40u);
  EXPECT_EQ(s.compute_infer.ns, 2000u);
  EXPECT_EQ(s.compute_output.ns, 80u);
  EXPECT_EQ(s.compute_output.count, 2u);
  EXPECT_EQ(s.fail.count, 0u);
  EXPECT_GT(s.last_inference_ms, 1'600'000'000'000u);  // ms since the epoch, after 2020
}

TEST(InferenceStatisticsTest, FailuresAreCountedByReason) {
  InferenceStatistics stats;
  stats.RecordFailure(10, FailureReason::kRejected);
  stats.RecordFailure(20, FailureReason::kRejected);
  stats.RecordFailure(30, FailureReason::kBackend);
  const auto s = stats.Snapshot();
  EXPECT_EQ(s.fail.count, 3u);
  EXPECT_EQ(s.fail.ns, 60u);
  EXPECT_EQ(s.fail_by_reason[static_cast<int>(FailureReason::kRejected)], 2u);
  EXPECT_EQ(s.fail_by_reason[static_cast<int>(FailureReason::kBackend)], 1u);
  EXPECT_EQ(s.fail_by_reason[static_cast<int>(FailureReason::kCanceled)], 0u);
  EXPECT_EQ(s.success.count, 0u);
  EXPECT_GT(s.last_inference_ms, 0u);
}

TEST(InferenceStatisticsTest, FailureReasonsHaveTritonsNames) {
  EXPECT_STREQ(FailureReasonName(FailureReason::kRejected), "REJECTED");
  EXPECT_STREQ(FailureReasonName(FailureReason::kCanceled), "CANCELED");
  EXPECT_STREQ(FailureReasonName(FailureReason::kBackend), "BACKEND");
  EXPECT_STREQ(FailureReasonName(FailureReason::kOther), "OTHER");
}

TEST(InferenceStatisticsTest, ExecutionsCountSamplesAndGroupByBatchSize) {
  InferenceStatistics stats;
  stats.RecordExecution(4, 1, 2, 3);
  stats.RecordExecution(1, 10, 20, 30);
  stats.RecordExecution(4, 100, 200, 300);
  const auto s = stats.Snapshot();
  EXPECT_EQ(s.execution_count, 3u);
  EXPECT_EQ(s.inference_count, 9u);
  ASSERT_EQ(s.batch_stats.size(), 2u);
  EXPECT_EQ(s.batch_stats[0].batch_size, 1u);  // ascending
  EXPECT_EQ(s.batch_stats[0].compute_infer.count, 1u);
  EXPECT_EQ(s.batch_stats[0].compute_infer.ns, 20u);
  EXPECT_EQ(s.batch_stats[1].batch_size, 4u);
  EXPECT_EQ(s.batch_stats[1].compute_input.count, 2u);
  EXPECT_EQ(s.batch_stats[1].compute_input.ns, 101u);
  EXPECT_EQ(s.batch_stats[1].compute_infer.ns, 202u);
  EXPECT_EQ(s.batch_stats[1].compute_output.ns, 303u);
  EXPECT_EQ(s.success.count, 0u) << "executions are not requests";
}

TEST(InferenceStatisticsTest, PendingIsAGauge) {
  InferenceStatistics stats;
  stats.AddPending(3);
  stats.AddPending(-2);
  EXPECT_EQ(stats.Snapshot().pending, 1);
}

TEST(InferenceStatisticsTest, ConcurrentRecordingLosesNothing) {
  InferenceStatistics stats;
  constexpr int kThreads = 4, kEach = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        stats.RecordSuccess(2, 1, 1, 1, 1);
        stats.RecordExecution(1 + (i + t) % 3, 1, 1, 1);
        stats.AddPending(1);
        stats.AddPending(-1);
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto s = stats.Snapshot();
  EXPECT_EQ(s.success.count, uint64_t{kThreads * kEach});
  EXPECT_EQ(s.success.ns, uint64_t{2 * kThreads * kEach});
  EXPECT_EQ(s.execution_count, uint64_t{kThreads * kEach});
  uint64_t executions = 0, samples = 0;
  for (const auto& b : s.batch_stats) {
    executions += b.compute_infer.count;
    samples += b.batch_size * b.compute_infer.count;
  }
  EXPECT_EQ(executions, s.execution_count);
  EXPECT_EQ(samples, s.inference_count);
  EXPECT_EQ(s.pending, 0);
}

}  // namespace
}  // namespace vramd::runtime
