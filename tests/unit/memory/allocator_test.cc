// Allocator: an allocation the device cannot give fails with a message naming who holds the
// device, from the ledger (issue 17: OOM reports that name holders).
#include "memory/allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memory/ledger.h"

namespace vramd::memory {
namespace {

using ::testing::HasSubstr;

constexpr size_t kAllocMiB = size_t{1} << 20;

TEST(AllocatorTest, OutOfMemoryNamesTheLargestHoldersOfThatDevice) {
  Ledger ledger;
  Allocator allocator(&ledger);
  const OwnerId a = ledger.OpenOwner(ledger.root(), OwnerKind::kModel, "a");
  const OwnerId b = ledger.OpenOwner(ledger.root(), OwnerKind::kModel, "b");
  std::vector<Buffer> held;
  for (int i = 0; i < 3; ++i) {
    auto buffer = allocator.Allocate(Device::Cpu(), kAllocMiB, 0, a);
    ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
    held.push_back(std::move(buffer).value());
  }
  auto other = allocator.Allocate(Device::Cpu(), 2 * kAllocMiB, 0, b);
  ASSERT_TRUE(other.ok());
  held.push_back(std::move(other).value());

  // More than any machine has: the pool refuses it.
  auto huge = allocator.Allocate(Device::Cpu(), size_t{1} << 62, 0, a);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(huge.status().message(),
              HasSubstr("Held on cpu: 5.0 MiB by 2 owner(s), the most by server/model:a 3.0 MiB; "
                        "server/model:b 2.0 MiB; its pool keeps 1.0 MiB cached of 6.0 MiB "
                        "reserved (GET /v2/memory has the whole tree)."));
  // The failed allocation charged nothing.
  EXPECT_EQ(ledger.Stats(a)->live_bytes, static_cast<int64_t>(3 * kAllocMiB));

  held.clear();
  EXPECT_TRUE(ledger.CloseOwner(a).empty());
  EXPECT_TRUE(ledger.CloseOwner(b).empty());
}

TEST(AllocatorTest, OutOfMemoryListsAtMostFiveHolders) {
  Ledger ledger;
  Allocator allocator(&ledger);
  std::vector<Buffer> held;
  std::vector<OwnerId> owners;
  for (int i = 0; i < 7; ++i) {
    owners.push_back(ledger.OpenOwner(ledger.root(), OwnerKind::kModel, "m" + std::to_string(i)));
    auto buffer = allocator.Allocate(Device::Cpu(), (i + 1) * 4096, 0, owners.back());
    ASSERT_TRUE(buffer.ok());
    held.push_back(std::move(buffer).value());
  }
  auto huge = allocator.Allocate(Device::Cpu(), size_t{1} << 62, 0, owners[0]);
  ASSERT_FALSE(huge.ok());
  const std::string message(huge.status().message());
  EXPECT_THAT(message, HasSubstr("by 7 owner(s), the most by server/model:m6 28.0 KiB;"));
  EXPECT_THAT(message, HasSubstr("server/model:m2 12.0 KiB; and 2 more"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("server/model:m1 ")));
  held.clear();
  for (OwnerId o : owners) EXPECT_TRUE(ledger.CloseOwner(o).empty());
}

TEST(AllocatorTest, AQuotaRefusesBeforeThePoolIsAsked) {
  Ledger ledger;
  Allocator allocator(&ledger);
  const OwnerId version =
      ledger.OpenOwner(ledger.root(), OwnerKind::kVersion, "1", {{Device::Cpu(), 2 * kAllocMiB}});
  auto first = allocator.Allocate(Device::Cpu(), kAllocMiB, 0, version);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const uint64_t pool_allocations = (*allocator.Pool(Device::Cpu()))->Stats().total_allocations;

  auto refused = allocator.AllocateRaw(Device::Cpu(), 2 * kAllocMiB, 0, version);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("memory quota of server/version:1 refuses 2.0 MiB on cpu for "
                        "server/version:1: it holds 1.0 MiB of its 2.0 MiB there"));
  EXPECT_EQ((*allocator.Pool(Device::Cpu()))->Stats().total_allocations, pool_allocations);

  // Freed, the room is back; the pool is asked again.
  first->Reset();
  auto second = allocator.Allocate(Device::Cpu(), 2 * kAllocMiB, 0, version);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  second->Reset();
  EXPECT_TRUE(ledger.CloseOwner(version).empty());
}

TEST(AllocatorTest, AFailedAllocationGivesItsQuotaShareBack) {
  Ledger ledger;
  Allocator allocator(&ledger);
  const OwnerId version = ledger.OpenOwner(ledger.root(), OwnerKind::kVersion, "1",
                                           {{Device::Cpu(), size_t{1} << 62}});
  allocator.InjectFailure(1);
  ASSERT_FALSE(allocator.Allocate(Device::Cpu(), kAllocMiB, 0, version).ok());
  ASSERT_FALSE(allocator.Allocate(Device::Cpu(), (size_t{1} << 62) - 1, 0, version).ok());
  auto snapshot = ledger.Snapshot();
  for (const OwnerSnapshot& owner : snapshot) {
    if (owner.id != version) continue;
    ASSERT_EQ(owner.quota.size(), 1u);
    EXPECT_EQ(owner.quota[0].used_bytes, 0);  // neither the injected nor the pool's failure
    EXPECT_EQ(owner.quota[0].refusals, 0u);
  }
}

TEST(AllocatorTest, OutOfMemoryEndsWithTheDeviceNote) {
  Ledger ledger;
  Allocator allocator(&ledger);
  std::vector<Device> asked;
  allocator.SetDeviceNote([&asked](Device device) {
    asked.push_back(device);
    return std::string("NVML: 3 bytes free.");
  });
  auto huge = allocator.Allocate(Device::Cpu(), size_t{1} << 62);
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(),
              HasSubstr("(GET /v2/memory has the whole tree). NVML: 3 bytes free."));
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], Device::Cpu());
  // A quota's refusal is about the model, not the device: no note.
  const OwnerId version =
      ledger.OpenOwner(ledger.root(), OwnerKind::kVersion, "1", {{Device::Cpu(), 1}});
  EXPECT_FALSE(allocator.Allocate(Device::Cpu(), 2, 0, version).ok());
  EXPECT_EQ(asked.size(), 1u);
  allocator.SetDeviceNote(nullptr);
}

}  // namespace
}  // namespace vramd::memory
