// Allocator::Park and Unpark (docs/memory.md, "Sleeping in place") on the CPU's VMM pool
// (--device-pool=vmm over mmap): a parked allocation's pages have no access, so a parked byte
// read by mistake crashes the test. Every allocation is filled with a pattern and read back at
// the same address after the wake.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "memory/allocator.h"
#include "memory/ledger.h"
#include "memory/quota.h"

namespace vramd::memory {
namespace {

using ::testing::HasSubstr;

constexpr size_t kParkMiB = size_t{1} << 20;

struct ParkSetup {
  explicit ParkSetup(Ledger::Options options = {}) : ledger(std::move(options)) {
    allocator.SetDevicePool(DevicePool::kVmm);
  }
  Ledger ledger;
  Allocator allocator{&ledger};
  OwnerId model = ledger.OpenOwner(ledger.root(), OwnerKind::kModel, "m");
  OwnerId version = ledger.OpenOwner(model, OwnerKind::kVersion, "1");
  OwnerId instance = ledger.OpenOwner(version, OwnerKind::kInstance, "m_0");
  OwnerId request = ledger.OpenOwner(version, OwnerKind::kRequest, "7");

  void* Hold(size_t size, OwnerId owner, uint8_t tag) {
    auto made = allocator.AllocateRaw(Device::Cpu(), size, 0, owner);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    if (!made.ok()) return nullptr;
    std::memset(*made, tag, size);
    return *made;
  }
  int64_t Cpu(OwnerId owner) {
    auto stats = ledger.Stats(owner);
    return stats.ok() ? stats->live_bytes : -1;
  }
  PoolStats CpuPool() {
    for (const PoolStats& p : allocator.PoolStatistics()) {
      if (p.device == Device::Cpu()) return p;
    }
    return {};
  }
};

bool ParkTestHolds(const void* ptr, size_t size, uint8_t tag) {
  const auto* p = static_cast<const uint8_t*>(ptr);
  return std::all_of(p, p + size, [&](uint8_t v) { return v == tag; });
}

TEST(AllocatorParkTest, ParkGivesBackWhatAVersionKeepsAndUnparkBringsItBackAtTheSameAddresses) {
  ParkSetup s;
  void* weights = s.Hold(8 * kParkMiB, s.instance, 0x11);
  void* table = s.Hold(4 * kParkMiB, s.version, 0x22);
  void* response = s.Hold(1 * kParkMiB, s.request, 0x33);
  const PoolStats awake = s.CpuPool();
  EXPECT_EQ(awake.decommit_granularity, 2 * kParkMiB);

  Result<size_t> given = s.allocator.Park(s.version, {Device::Cpu()});
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  // The first allocation has a segment of its own (every granule); the second may share edge
  // granules with its neighbours.
  EXPECT_GE(*given, 8 * kParkMiB + 2 * kParkMiB);
  EXPECT_EQ(s.allocator.ParkedBytes(s.version), 12 * kParkMiB);
  // The ledger: the instance holds nothing now; the version holds the copies; the request's
  // response was not touched (it may be on its way to a client).
  EXPECT_EQ(s.Cpu(s.instance), 0);
  EXPECT_EQ(s.Cpu(s.version), static_cast<int64_t>(12 * kParkMiB));
  EXPECT_EQ(s.Cpu(s.request), static_cast<int64_t>(1 * kParkMiB));
  EXPECT_TRUE(ParkTestHolds(response, kParkMiB, 0x33));
  EXPECT_GE(s.CpuPool().hole_bytes, *given);

  ASSERT_TRUE(s.allocator.Unpark(s.version).ok());
  EXPECT_EQ(s.allocator.ParkedBytes(s.version), 0u);
  EXPECT_EQ(s.Cpu(s.instance), static_cast<int64_t>(8 * kParkMiB));
  EXPECT_EQ(s.Cpu(s.version), static_cast<int64_t>(4 * kParkMiB));
  EXPECT_TRUE(ParkTestHolds(weights, 8 * kParkMiB, 0x11));
  EXPECT_TRUE(ParkTestHolds(table, 4 * kParkMiB, 0x22));
  EXPECT_TRUE(s.allocator.Unpark(s.version).ok());  // nothing left: a no-op

  for (void* p : {weights, table, response}) s.allocator.Free(Device::Cpu(), p);
  EXPECT_EQ(s.ledger.unknown_frees(), 0u);
  s.allocator.TrimAll();
  EXPECT_EQ(s.CpuPool().reserved_bytes, 0u);
  EXPECT_EQ(s.CpuPool().hole_bytes, 0u);
}

TEST(AllocatorParkTest, AParkedAllocationCanBeFreedAndItsCopyGoesWithIt) {
  ParkSetup s;
  void* weights = s.Hold(6 * kParkMiB, s.instance, 0x44);
  ASSERT_TRUE(s.allocator.Park(s.version, {Device::Cpu()}).ok());
  EXPECT_EQ(s.Cpu(s.version), static_cast<int64_t>(6 * kParkMiB));
  // An unload while asleep: the backend frees what it kept.
  s.allocator.Free(Device::Cpu(), weights);
  EXPECT_EQ(s.allocator.ParkedBytes(s.version), 0u);
  EXPECT_EQ(s.Cpu(s.version), 0);
  EXPECT_EQ(s.Cpu(s.instance), 0);
  EXPECT_EQ(s.ledger.unknown_frees(), 0u);
  EXPECT_TRUE(s.allocator.Unpark(s.version).ok());
  s.allocator.TrimAll();
  EXPECT_EQ(s.CpuPool().reserved_bytes, 0u);
  EXPECT_EQ(s.CpuPool().hole_bytes, 0u);
}

TEST(AllocatorParkTest, AWakeTheQuotaRefusesLeavesTheRestParkedAndCanBeTriedAgain) {
  ParkSetup s;
  // A version with a quota of 20 MiB on cpu. Asleep, its copy counts against the quota (the
  // copy is the version's); a filler made meanwhile leaves no room to map the weights again.
  OwnerId bounded = s.ledger.OpenOwner(s.model, OwnerKind::kVersion, "2",
                                       MemoryQuota{QuotaLimit{Device::Cpu(), 20 * 1024 * 1024}});
  OwnerId inst = s.ledger.OpenOwner(bounded, OwnerKind::kInstance, "m_1");
  void* weights = s.Hold(8 * kParkMiB, inst, 0x55);
  ASSERT_TRUE(s.allocator.Park(bounded, {Device::Cpu()}).ok());
  // 8 MiB copy + 10 MiB filler = 18 of 20 MiB: the 8 MiB back on top would pass the quota.
  void* filler = s.Hold(10 * kParkMiB, bounded, 0x66);
  ASSERT_NE(filler, nullptr);
  Status refused = s.allocator.Unpark(bounded);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  EXPECT_THAT(refused.message(), HasSubstr("waking 8.0 MiB"));
  EXPECT_EQ(s.allocator.ParkedBytes(bounded), 8 * kParkMiB);
  s.allocator.Free(Device::Cpu(), filler);
  ASSERT_TRUE(s.allocator.Unpark(bounded).ok());
  EXPECT_TRUE(ParkTestHolds(weights, 8 * kParkMiB, 0x55));
  s.allocator.Free(Device::Cpu(), weights);
}

TEST(AllocatorParkTest, ChargesThatAreNotThePoolsMemoryStayWhereTheyAre) {
  ParkSetup s;
  void* weights = s.Hold(4 * kParkMiB, s.instance, 0x77);
  // What a library took outside the pools is charged at a made-up address (native_memory.h):
  // there is nothing there to copy (a copy of 64 MiB from it crashed the GPU run).
  int key = 0;
  s.ledger.RecordAllocation(&key, 64 * kParkMiB, Device::Cpu(), s.instance);
  Result<size_t> given = s.allocator.Park(s.version, {Device::Cpu()});
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(s.allocator.ParkedBytes(s.version), 4 * kParkMiB);
  EXPECT_EQ(s.Cpu(s.instance), static_cast<int64_t>(64 * kParkMiB));
  ASSERT_TRUE(s.allocator.Unpark(s.version).ok());
  EXPECT_TRUE(ParkTestHolds(weights, 4 * kParkMiB, 0x77));
  s.ledger.RecordFree(&key);
  s.allocator.Free(Device::Cpu(), weights);
}

TEST(AllocatorParkTest, WithTheCachingPoolNothingIsParked) {
  Ledger ledger;
  Allocator allocator(&ledger);
  EXPECT_FALSE(allocator.CanPark());
  OwnerId version = ledger.OpenOwner(ledger.root(), OwnerKind::kVersion, "1");
  auto held = allocator.Allocate(Device::Cpu(), 4 * kParkMiB, 0, version);
  ASSERT_TRUE(held.ok());
  Result<size_t> given = allocator.Park(version, {Device::Cpu()});
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(*given, 0u);
  EXPECT_EQ(allocator.ParkedBytes(version), 0u);
  std::memset(held->data(), 1, 4 * kParkMiB);  // still its memory
}

TEST(AllocatorParkTest, ParseDevicePoolNamesTheChoices) {
  EXPECT_EQ(*ParseDevicePool("vmm"), DevicePool::kVmm);
  EXPECT_EQ(*ParseDevicePool("caching"), DevicePool::kCaching);
  Result<DevicePool> bad = ParseDevicePool("paged");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("\"caching\" or \"vmm\""));
}

}  // namespace
}  // namespace vramd::memory
