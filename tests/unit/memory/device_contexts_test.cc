// GPU contexts made on first use and measured then (memory/device_contexts.h), with fake
// CUDA and NVML hooks: which GPUs get a context, when its figure is read, and what a failure
// leaves.
#include "memory/device_contexts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "memory/allocator.h"

namespace vramd::memory {
namespace {

using ::testing::HasSubstr;

// A fake process on `gpus` GPUs: making a context on GPU d adds 500 MiB + d to its figure there.
struct DeviceContextsTest_Fake {
  int gpus = 2;
  std::map<int, int> made;  // context makes per GPU
  std::map<int, uint64_t> used;
  int failures_left = 0;

  DeviceContexts::Hooks Hooks() {
    DeviceContexts::Hooks hooks;
    hooks.device_count = [this] { return gpus; };
    hooks.make_context = [this](int d) -> Status {
      if (failures_left > 0) {
        --failures_left;
        return Status::Unavailable("cuda:" + std::to_string(d) + ": out of memory");
      }
      ++made[d];
      used[d] += (500u << 20) + static_cast<uint64_t>(d);
      return Status::Ok();
    };
    hooks.process_used = [this](int d) -> Result<uint64_t> {
      auto it = used.find(d);
      if (it == used.end()) return Status::NotFound("this process is not listed");
      return it->second;
    };
    return hooks;
  }
};

TEST(DeviceContextsTest, NoGpuHasAContextUntilSomethingOpensIt) {
  DeviceContextsTest_Fake fake;
  DeviceContexts contexts(fake.Hooks());
  auto baselines = contexts.Baselines();
  ASSERT_EQ(baselines.size(), 2u);
  for (const ContextBaseline& b : baselines) {
    EXPECT_FALSE(b.bytes.has_value());
    EXPECT_THAT(b.reason, HasSubstr("no CUDA context yet: nothing has used cuda:"));
  }
  EXPECT_TRUE(fake.made.empty());
  EXPECT_FALSE(contexts.IsOpen(0));
}

TEST(DeviceContextsTest, OpeningAGpuMakesItsContextOnceAndMeasuresItThen) {
  DeviceContextsTest_Fake fake;
  DeviceContexts contexts(fake.Hooks());
  ASSERT_TRUE(contexts.Open(1).ok());
  // Memory used after the context is not part of its baseline.
  fake.used[1] += 64u << 20;
  ASSERT_TRUE(contexts.Open(1).ok());
  EXPECT_EQ(fake.made[1], 1);
  EXPECT_EQ(fake.made.count(0), 0u) << "GPU 0 is used by nothing and gets no context";
  auto baselines = contexts.Baselines();
  ASSERT_EQ(baselines.size(), 2u);
  EXPECT_EQ(baselines[0].ordinal, 0);
  EXPECT_FALSE(baselines[0].bytes.has_value());
  EXPECT_EQ(baselines[1].ordinal, 1);
  ASSERT_TRUE(baselines[1].bytes.has_value());
  EXPECT_EQ(*baselines[1].bytes, (500 << 20) + 1);
  EXPECT_TRUE(contexts.IsOpen(1));
}

TEST(DeviceContextsTest, ConcurrentOpensMakeOneContext) {
  DeviceContextsTest_Fake fake;
  fake.gpus = 4;
  DeviceContexts contexts(fake.Hooks());
  std::atomic<int> failed{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&contexts, &failed, t] {
        for (int i = 0; i < 100; ++i) {
          if (!contexts.Open((t + i) % 4).ok()) ++failed;
        }
      });
    }
  }
  EXPECT_EQ(failed.load(), 0);
  for (int d = 0; d < 4; ++d) EXPECT_EQ(fake.made[d], 1) << "cuda:" << d;
}

TEST(DeviceContextsTest, AContextThatCannotBeMadeIsAnErrorAndTriedAgain) {
  DeviceContextsTest_Fake fake;
  fake.failures_left = 1;
  DeviceContexts contexts(fake.Hooks());
  Status s = contexts.Open(0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("cuda:0: out of memory"));
  EXPECT_FALSE(contexts.IsOpen(0));
  ASSERT_TRUE(contexts.Open(0).ok());
  EXPECT_EQ(fake.made[0], 1);
}

TEST(DeviceContextsTest, WithoutAFigureTheContextIsMadeAndTheBaselineSaysWhy) {
  DeviceContextsTest_Fake fake;
  DeviceContexts::Hooks hooks = fake.Hooks();
  hooks.process_used = nullptr;
  hooks.no_figure_reason = "NVML unavailable: no driver";
  DeviceContexts contexts(std::move(hooks));
  ASSERT_TRUE(contexts.Open(0).ok());
  EXPECT_EQ(fake.made[0], 1);
  auto baselines = contexts.Baselines();
  ASSERT_EQ(baselines.size(), 2u);
  EXPECT_FALSE(baselines[0].bytes.has_value());
  EXPECT_EQ(baselines[0].reason, "NVML unavailable: no driver");
}

// A GPU opened beyond those counted (a device the count no longer shows) is still listed.
TEST(DeviceContextsTest, BaselinesListOpenedGpusInOrder) {
  DeviceContextsTest_Fake fake;
  fake.gpus = 0;
  DeviceContexts contexts(fake.Hooks());
  ASSERT_TRUE(contexts.Open(3).ok());
  ASSERT_TRUE(contexts.Open(1).ok());
  auto baselines = contexts.Baselines();
  ASSERT_EQ(baselines.size(), 2u);
  EXPECT_EQ(baselines[0].ordinal, 1);
  EXPECT_EQ(baselines[1].ordinal, 3);
}

// The allocator opens a device before its pool's first segment, and never for host memory;
// without CUDA the pool then fails as before, and the context is not counted as made.
TEST(DeviceContextsTest, TheAllocatorOpensAGpuBeforeItsFirstSegmentAndNotForTheCpu) {
  DeviceContextsTest_Fake fake;
  fake.failures_left = 1000;  // no CUDA here: every make fails
  DeviceContexts contexts(fake.Hooks());
  Ledger ledger;
  Allocator allocator(&ledger);
  allocator.SetDeviceContexts(&contexts);
  auto cpu = allocator.Allocate(Device::Cpu(), 1024);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ(fake.failures_left, 1000) << "a CPU allocation opened a GPU";
  auto gpu = allocator.Allocate(Device::Cuda(1), 1024);
  ASSERT_FALSE(gpu.ok());
  EXPECT_THAT(gpu.status().message(), HasSubstr("cuda:1: out of memory"));
  EXPECT_EQ(fake.failures_left, 999);
  allocator.SetDeviceContexts(nullptr);
}

}  // namespace
}  // namespace vramd::memory
