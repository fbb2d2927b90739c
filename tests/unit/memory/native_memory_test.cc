// NativeMemoryMeter (src/memory/native_memory.h) against a fake NVML whose process figure the
// measured stretch moves: growth outside the pools is charged to the instance's owner in the
// ledger and released with its NativeCharges (no leak), small or negative growth is not
// charged, three executions are measured and no more, no NVML means no charge, a model's
// creation is measured on each of its GPUs, what outlives its owner becomes its backend's
// residue (and leaves it when a later end gives it back), and the memory report takes charges
// and residues out of the unattributed figure and raises the alarm past its threshold.
#include "memory/native_memory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "memory/memory_report.h"
#include "memory/unattributed_alarm.h"

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
    if (ordinal == 1) return used1.load();
    if (ordinal != 0) return Status::Unavailable("no such device");
    return used.load();
  }
  Result<NvmlUtilization> Utilization(int) const override { return NvmlUtilization{}; }
  Result<std::string> Name(int) const override { return std::string("Fake GPU"); }
  Result<std::string> Uuid(int) const override { return std::string("GPU-fake"); }

  std::atomic<uint64_t> used{600 * kNativeTestMiB};
  std::atomic<uint64_t> used1{600 * kNativeTestMiB};  // a second GPU's figure
};

class NativeMemoryTest : public ::testing::Test {
 protected:
  NativeMemoryTest()
      : model_(ledger_.OpenOwner(ledger_.root(), OwnerKind::kModel, "m")),
        instance_(ledger_.OpenOwner(model_, OwnerKind::kInstance, "m_0")) {}

  int64_t Live(OwnerId owner) { return ledger_.Stats(owner)->live_bytes; }
  // Live bytes of backend `name`'s owner (under the root); -1 when there is none.
  int64_t BackendLive(const std::string& name) {
    for (const OwnerSnapshot& o : ledger_.Snapshot()) {
      if (o.parent == ledger_.root() && o.kind == OwnerKind::kBackend && o.name == name) {
        return o.self.live_bytes;
      }
    }
    return -1;
  }

  Ledger ledger_;
  Allocator allocator_{&ledger_};
  MovingNvml nvml_;
  NativeMemoryMeter meter_{&ledger_, &allocator_, &nvml_, 1234};
  OwnerId model_;
  OwnerId instance_;
};

TEST_F(NativeMemoryTest, GrowthOutsideThePoolsIsChargedToTheInstanceAndReleasedWithIt) {
  {
    NativeCharges charges(&meter_, instance_, 0, "pytorch");
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
  NativeCharges charges(&meter_, instance_, 0, "pytorch");
  charges.Measure([&] { nvml_.used += kNativeTestMiB / 2; });
  charges.Measure([&] { nvml_.used -= 64 * kNativeTestMiB; });
  EXPECT_EQ(charges.bytes(), 0);
  EXPECT_EQ(Live(instance_), 0);
}

TEST_F(NativeMemoryTest, OnlyTheFirstExecutionsAreMeasured) {
  NativeCharges charges(&meter_, instance_, 0, "pytorch");
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
  NativeCharges caller(&meter_, instance_, 0, "pytorch");
  NativeCharges callee(&meter_, callee_owner, 0, "pytorch");
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
  NativeCharges charges(&blind, instance_, 0, "pytorch");
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
  NativeCharges charges(&meter_, instance_, 0, "pytorch");
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
  NativeCharges charges(&meter_, instance_, 0, "pytorch");
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

TEST_F(NativeMemoryTest, WhatOutlivesItsOwnerBecomesTheBackendsResidue) {
  {
    NativeCharges first(&meter_, instance_, 0, "pytorch");
    first.Measure([&] { nvml_.used += 40 * kNativeTestMiB; });  // handles and modules
    // Its end gives back 10 MiB (a workspace); the modules and a pooled handle stay.
    first.ReleaseAround([&] { nvml_.used -= 10 * kNativeTestMiB; });
    EXPECT_FALSE(first.active());
    EXPECT_EQ(first.bytes(), 0);
  }
  EXPECT_EQ(Live(instance_), 0);
  EXPECT_TRUE(ledger_.CloseOwner(instance_).empty()) << "what stayed moved off the instance";
  EXPECT_EQ(BackendLive("pytorch"), 30 * kNativeTestMiB);
  EXPECT_EQ(meter_.ResidueTotal(0), 30 * kNativeTestMiB);
  EXPECT_EQ(meter_.Total(0), 30 * kNativeTestMiB);

  // The next instance reuses what stayed: it grows little, and is charged only that.
  OwnerId second_owner = ledger_.OpenOwner(model_, OwnerKind::kInstance, "m_1");
  NativeCharges second(&meter_, second_owner, 0, "pytorch");
  second.Measure([&] { nvml_.used += 4 * kNativeTestMiB; });
  EXPECT_EQ(second.bytes(), 4 * kNativeTestMiB);
  EXPECT_EQ(meter_.Total(0), 34 * kNativeTestMiB);
  // Its end gives back its own 4 MiB and 20 of the residue (the library let its pool go).
  second.ReleaseAround([&] { nvml_.used -= 24 * kNativeTestMiB; });
  EXPECT_EQ(BackendLive("pytorch"), 10 * kNativeTestMiB);
  EXPECT_EQ(meter_.Total(0), 10 * kNativeTestMiB);

  // An end that gives back more than everything charged empties the residue, no further.
  OwnerId third_owner = ledger_.OpenOwner(model_, OwnerKind::kInstance, "m_2");
  NativeCharges third(&meter_, third_owner, 0, "pytorch");
  third.ReleaseAround([&] { nvml_.used -= 50 * kNativeTestMiB; });
  EXPECT_EQ(BackendLive("pytorch"), 0);
  EXPECT_EQ(meter_.ResidueTotal(0), 0);
  EXPECT_EQ(meter_.Total(0), 0);
  // Another backend's end that leaves nothing opens no owner for it.
  OwnerId fourth_owner = ledger_.OpenOwner(model_, OwnerKind::kInstance, "m_3");
  NativeCharges fourth(&meter_, fourth_owner, 0, "python");
  fourth.ReleaseAround([&] {});
  EXPECT_EQ(BackendLive("python"), -1);
}

TEST_F(NativeMemoryTest, AnEndThatIsNotMeasuredJustReleases) {
  NativeMemoryMeter blind(&ledger_, &allocator_, nullptr, 1234);
  NativeCharges charges(&blind, instance_, 0, "pytorch");
  bool ended = false;
  charges.ReleaseAround([&] { ended = true; });
  EXPECT_TRUE(ended);
  EXPECT_FALSE(charges.active());
  NativeCharges none;
  ended = false;
  none.ReleaseAround([&] { ended = true; });
  EXPECT_TRUE(ended);
}

TEST_F(NativeMemoryTest, AModelsCreationIsMeasuredOnEachOfItsGpus) {
  OwnerId version = ledger_.OpenOwner(model_, OwnerKind::kVersion, "1");
  NativeCharges on0(&meter_, version, 0, "pytorch");
  NativeCharges on1(&meter_, version, 1, "pytorch");
  int runs = 0;
  EXPECT_TRUE(meter_.Measure({&on0, &on1},
                             [&] {
                               ++runs;
                               nvml_.used += 6 * kNativeTestMiB;
                               nvml_.used1 += 9 * kNativeTestMiB;
                             },
                             NativeMemoryMeter::kCreationWait));
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(on0.bytes(), 6 * kNativeTestMiB);
  EXPECT_EQ(on1.bytes(), 9 * kNativeTestMiB);
  EXPECT_EQ(meter_.Total(1), 9 * kNativeTestMiB);
  // Its end gives back all on cuda:1 and nothing on cuda:0.
  meter_.ReleaseAround({&on0, &on1}, [&] { nvml_.used1 -= 9 * kNativeTestMiB; });
  EXPECT_EQ(Live(version), 0);
  EXPECT_EQ(meter_.ResidueTotal(0), 6 * kNativeTestMiB);
  EXPECT_EQ(meter_.ResidueTotal(1), 0);
  // A device busy with another measurement: the creation runs once, unmeasured.
  NativeCharges again(&meter_, version, 1, "pytorch");
  bool measured = true;
  NativeCharges holder(&meter_, instance_, 1, "pytorch");
  holder.MeasureExecution([&] {
    std::thread loader([&] {
      measured = meter_.Measure({&again}, [&] { nvml_.used1 += 3 * kNativeTestMiB; },
                                std::chrono::milliseconds(10));
    });
    loader.join();
  });
  EXPECT_FALSE(measured);
  EXPECT_EQ(again.bytes(), 0);
}

TEST_F(NativeMemoryTest, AGroupIsMeasuredAndReleasedTogether) {
  OwnerId version = ledger_.OpenOwner(model_, OwnerKind::kVersion, "2");
  std::vector<NativeCharges> group;
  group.emplace_back(&meter_, version, 0, "python");
  group.emplace_back(&meter_, version, 1, "python");
  EXPECT_TRUE(NativeCharges::MeasureGroup(group, [&] {
    nvml_.used += 2 * kNativeTestMiB;
    nvml_.used1 += 3 * kNativeTestMiB;
  }, NativeMemoryMeter::kCreationWait));
  EXPECT_EQ(Live(version), 5 * kNativeTestMiB);
  NativeCharges::ReleaseGroupAround(group, [&] {
    nvml_.used -= 2 * kNativeTestMiB;
    nvml_.used1 -= 3 * kNativeTestMiB;
  });
  EXPECT_EQ(Live(version), 0);
  EXPECT_EQ(meter_.Total(0) + meter_.Total(1), 0);
  std::vector<NativeCharges> none;  // a CPU model's
  int runs = 0;
  EXPECT_TRUE(NativeCharges::MeasureGroup(none, [&] { ++runs; }, NativeMemoryMeter::kCreationWait));
  NativeCharges::ReleaseGroupAround(none, [&] { ++runs; });
  EXPECT_EQ(runs, 2);
}

TEST_F(NativeMemoryTest, TheAlarmRisesPastItsThresholdEitherWayAndClears) {
  UnattributedAlarm alarm(32 * kNativeTestMiB);
  EXPECT_FALSE(alarm.Observe(0, 20 * kNativeTestMiB).on);
  UnattributedAlarm::State s = alarm.Observe(0, 40 * kNativeTestMiB);
  EXPECT_TRUE(s.on);
  EXPECT_EQ(s.raised, 1u);
  EXPECT_EQ(alarm.Observe(0, 50 * kNativeTestMiB).raised, 1u) << "raised once while it stays on";
  EXPECT_FALSE(alarm.Observe(0, 0).on);
  s = alarm.Observe(0, -40 * kNativeTestMiB);  // charged twice
  EXPECT_TRUE(s.on);
  EXPECT_EQ(s.raised, 2u);
  EXPECT_FALSE(alarm.Current(1).on) << "per device";
  UnattributedAlarm off(0);
  EXPECT_FALSE(off.Observe(0, 1LL << 40).on);
  EXPECT_FALSE(alarm.Observe(-1, 1LL << 40).on);
}

TEST_F(NativeMemoryTest, TheReportRaisesTheAlarmOnWhatNoOwnerHolds) {
  UnattributedAlarm alarm(32 * kNativeTestMiB);
  MemoryReportOptions options;
  options.native = &meter_;
  options.unattributed_alarm = &alarm;
  std::vector<ContextBaseline> baselines{{0, 600 * kNativeTestMiB, ""}};
  NativeCharges charges(&meter_, instance_, 0, "pytorch");
  charges.Measure([&] { nvml_.used += 80 * kNativeTestMiB; });
  // 680 in use = 600 context + 80 charged.
  MemoryReport report = BuildMemoryReport(ledger_, {}, &nvml_, baselines, options);
  ASSERT_EQ(report.devices.size(), 1u);
  EXPECT_EQ(*report.devices[0].unattributed_bytes, 0);
  EXPECT_FALSE(report.devices[0].unattributed_alarm);
  nvml_.used += 40 * kNativeTestMiB;  // a cudaMalloc behind the ledger's back
  report = BuildMemoryReport(ledger_, {}, &nvml_, baselines, options);
  EXPECT_TRUE(report.devices[0].unattributed_alarm);
  EXPECT_EQ(report.devices[0].unattributed_alarms_raised, 1u);
  const std::string json = MemoryReportToJson(report);
  EXPECT_NE(json.find("\"unattributed_alarm\":true"), std::string::npos) << json;
  EXPECT_NE(json.find("\"alarm\":true"), std::string::npos);
  // Once a residue explains it, the alarm clears.
  charges.ReleaseAround([] {});  // all 80 stay: the backend's now
  nvml_.used -= 40 * kNativeTestMiB;
  report = BuildMemoryReport(ledger_, {}, &nvml_, baselines, options);
  EXPECT_EQ(report.devices[0].native_residue_bytes, 80 * kNativeTestMiB);
  EXPECT_EQ(*report.devices[0].unattributed_bytes, 0);
  EXPECT_FALSE(report.devices[0].unattributed_alarm);
  EXPECT_NE(MemoryReportToJson(report).find("\"native_residue_bytes\":83886080"),
            std::string::npos);
}

}  // namespace
}  // namespace vramd::memory
