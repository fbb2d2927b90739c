// NativeMemoryMeter (src/memory/native_memory.h) against a fake NVML whose process figure the
// measured stretch moves: growth outside the pools is charged to the instance's owner in the
// ledger and released with its NativeCharges (no leak), small or negative growth is not
// charged, three executions are measured and no more, no NVML means no charge, and the memory
// report takes the charges out of the unattributed figure.
#include "memory/native_memory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "memory/memory_report.h"

namespace vramd::memory {
namespace {

constexpr int64_t kNativeTestMiB = 1 << 20;

class MovingNvml : public Nvml {
 public:
  int DeviceCount() const override { return 1; }
  Result<NvmlMemoryInfo> DeviceMemory(int) const override {
    return NvmlMemoryInfo{80 * 1024 * kNativeTestMiB, 10 * 1024 * kNativeTestMiB, 70 * 1024 * kNativeTestMiB, std::nullopt};
  }
  Result<uint64_t> ProcessUsedBytes(int ordinal, uint32_t) const override {
    if (ordinal != 0) return Status::Unavailable("no such device");
    return used.load();
  }
  Result<NvmlUtilization> Utilization(int) const override { return NvmlUtilization{}; }
  Result<std::string> Name(int) const override { return std::string("Fake GPU"); }
  Result<std::string> Uuid(int) const override { return std::string("GPU-fake"); }

  std::atomic<uint64_t> used{600 * kNativeTestMiB};
};

class NativeMemoryTest : public ::testing::Test {
 protected:
  NativeMemoryTest()
      : model_(ledger_.OpenOwner(ledger_.root(), OwnerKind::kModel, "m")),
        instance_(ledger_.OpenOwner(model_, OwnerKind::kInstance, "m_0")) {}

  int64_t Live(OwnerId owner) { return ledger_.Stats(owner)->live_bytes; }

  Ledger ledger_;
  Allocator allocator_{&ledger_};
  MovingNvml nvml_;
  NativeMemoryMeter meter_{&ledger_, &allocator_, &nvml_, 1234};
  OwnerId model_;
  OwnerId instance_;
};

TEST_F(NativeMemoryTest, GrowthOutsideThePoolsIsChargedToTheInstanceAndReleasedWithIt) {
  {
    NativeCharges charges(&meter_, instance_, 0);
    charges.Measure([&] { nvml_.used += 48 * kNativeTestMiB; });  // a cuDNN handle, say
    EXPECT_EQ(charges.bytes(), 48 * kNativeTestMiB);
    EXPECT_EQ(Live(instance_), 48 * kNativeTestMiB);
    EXPECT_EQ(meter_.Total(0), 48 * kNativeTestMiB);
    charges.Measure([&] { nvml_.used += 8 * kNativeTestMiB; });
    EXPECT_EQ(Live(instance_), 56 * kNativeTestMiB);
    EXPECT_EQ(meter_.Total(0), 56 * kNativeTestMiB);
  }
  EXPECT_EQ(Live(instance_), 0);
  EXPECT_EQ(meter_.Total(0), 0);
  EXPECT_TRUE(ledger_.CloseOwner(instance_).empty()) << "a released charge is no leak";
}

TEST_F(NativeMemoryTest, SmallOrNegativeGrowthIsNotCharged) {
  NativeCharges charges(&meter_, instance_, 0);
  charges.Measure([&] { nvml_.used += kNativeTestMiB / 2; });
  charges.Measure([&] { nvml_.used -= 64 * kNativeTestMiB; });
  EXPECT_EQ(charges.bytes(), 0);
  EXPECT_EQ(Live(instance_), 0);
}

TEST_F(NativeMemoryTest, OnlyTheFirstExecutionsAreMeasured) {
  NativeCharges charges(&meter_, instance_, 0);
  int measured = 0;
  for (int i = 0; i < 10; ++i) {
    if (!NativeMemoryMeter::WantsExecution(charges)) continue;
    charges.MeasureExecution([&] { nvml_.used += 2 * kNativeTestMiB; });
    ++measured;
  }
  EXPECT_EQ(measured, NativeMemoryMeter::kExecutionsMeasured);
  EXPECT_EQ(charges.bytes(), NativeMemoryMeter::kExecutionsMeasured * 2 * kNativeTestMiB);
}

// An execution that waits for another model's execution on the same device (a BLS call) must
// not wait for the device's measurement: that one is unmeasured, and counted for later.
TEST_F(NativeMemoryTest, AnExecutionNestedInAMeasuredOneRunsUnmeasured) {
  OwnerId callee_owner = ledger_.OpenOwner(model_, OwnerKind::kInstance, "callee_0");
  NativeCharges caller(&meter_, instance_, 0);
  NativeCharges callee(&meter_, callee_owner, 0);
  bool callee_ran = false;
  caller.MeasureExecution([&] {
    std::thread other([&] {  // the called model's instance thread
      callee.MeasureExecution([&] {
        callee_ran = true;
        nvml_.used += 2 * kNativeTestMiB;
      });
    });
    other.join();  // the caller waits for its answer
  });
  EXPECT_TRUE(callee_ran);
  EXPECT_EQ(caller.executions_measured, 1);
  EXPECT_EQ(callee.executions_measured, 0) << "a later execution of it is measured instead";
  EXPECT_EQ(caller.bytes(), 2 * kNativeTestMiB) << "what grew during the caller's stretch is blamed on it";
  callee.MeasureExecution([&] { nvml_.used += 4 * kNativeTestMiB; });
  EXPECT_EQ(callee.executions_measured, 1);
  EXPECT_EQ(callee.bytes(), 4 * kNativeTestMiB);
  // A creation on a device being measured (a model loaded from an execution) waits a bounded
  // time, then is created unmeasured.
  bool created = false;
  caller.MeasureExecution([&] {
    std::thread loader([&] { callee.Measure([&] { created = true; }); });
    loader.join();
  });
  EXPECT_TRUE(created);
}

TEST_F(NativeMemoryTest, WithoutNvmlTheStretchRunsAndNothingIsCharged) {
  NativeMemoryMeter blind(&ledger_, &allocator_, nullptr, 1234);
  NativeCharges charges(&blind, instance_, 0);
  bool ran = false;
  charges.Measure([&] {
    ran = true;
    nvml_.used += 100 * kNativeTestMiB;
  });
  EXPECT_TRUE(ran);
  EXPECT_EQ(charges.bytes(), 0);
  NativeCharges none;  // a CPU instance's
  EXPECT_FALSE(NativeMemoryMeter::WantsExecution(none));
}

TEST_F(NativeMemoryTest, MovedChargesAreReleasedOnce) {
  NativeCharges charges(&meter_, instance_, 0);
  charges.Measure([&] { nvml_.used += 4 * kNativeTestMiB; });
  NativeCharges moved(std::move(charges));
  EXPECT_EQ(moved.bytes(), 4 * kNativeTestMiB);
  charges = NativeCharges();  // releasing the moved-from one releases nothing
  EXPECT_EQ(Live(instance_), 4 * kNativeTestMiB);
  moved = NativeCharges();
  EXPECT_EQ(Live(instance_), 0);
  EXPECT_EQ(meter_.Total(0), 0);
}

TEST_F(NativeMemoryTest, TheReportTakesTheChargesOutOfUnattributed) {
  NativeCharges charges(&meter_, instance_, 0);
  charges.Measure([&] { nvml_.used += 40 * kNativeTestMiB; });
  std::vector<ContextBaseline> baselines{{0, 500 * kNativeTestMiB, ""}};
  MemoryReportOptions options;
  options.native = &meter_;
  PoolStats pool;
  pool.device = Device::Cuda(0);
  pool.reserved_bytes = 64 * kNativeTestMiB;
  MemoryReport report = BuildMemoryReport(ledger_, {pool}, &nvml_, baselines, options);
  ASSERT_EQ(report.devices.size(), 1u);
  const DeviceMemoryReport& d = report.devices[0];
  EXPECT_EQ(d.native_measured_bytes, 40 * kNativeTestMiB);
  // 640 MiB in use = 64 pool + 500 context + 40 native + 36 nobody's.
  EXPECT_EQ(*d.unattributed_bytes, 36 * kNativeTestMiB);
  EXPECT_NE(MemoryReportToJson(report).find("\"native_measured_bytes\":41943040"),
            std::string::npos);
}

}  // namespace
}  // namespace vramd::memory
