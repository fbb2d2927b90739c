// Allocator: memory pressure relief (docs/memory.md, "Sleeping models"). An
// allocation inside a ReliefScope that the server's budget or the device
// refuses asks the PressureRelief to put an idle model to sleep, and is tried
// again after each relief that did.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "memory/allocator.h"
#include "memory/ledger.h"

namespace vramd::memory {
namespace {

using ::testing::HasSubstr;

constexpr size_t kAllocatorReliefTest_KiB = 1024;
constexpr int64_t kAllocatorReliefTest_Budget = 1024 * 1024;  // 1 MiB on cpu

Ledger::Options AllocatorReliefTest_Budgeted() {
  Ledger::Options options;
  options.budget = {{Device::Cpu(), kAllocatorReliefTest_Budget}};
  return options;
}

// Records its calls; each answers what `on_relieve` says (false without one).
class AllocatorReliefTest_Relief : public Allocator::PressureRelief {
 public:
  struct Call {
    Device device;
    size_t size;
    OwnerId asking;
  };
  bool Relieve(Device device, size_t size, OwnerId asking) override {
    calls.push_back({device, size, asking});
    return on_relieve ? on_relieve() : false;
  }
  std::vector<Call> calls;
  std::function<bool()> on_relieve;
};

// A ledger with a 1 MiB budget on cpu, two models, and an allocator.
struct AllocatorReliefTest_Setup {
  Ledger ledger{AllocatorReliefTest_Budgeted()};
  Allocator allocator{&ledger};
  OwnerId a = ledger.OpenOwner(ledger.root(), OwnerKind::kModel, "a");
  OwnerId b = ledger.OpenOwner(ledger.root(), OwnerKind::kModel, "b");

  Buffer Hold(size_t size, OwnerId owner) {
    auto buffer = allocator.Allocate(Device::Cpu(), size, 0, owner);
    EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
    return buffer.ok() ? std::move(buffer).value() : Buffer();
  }
};

TEST(AllocatorReliefTest, OutsideAReliefScopeABudgetRefusalDoesNotCallTheRelief) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  Buffer held = setup.Hold(768 * kAllocatorReliefTest_KiB, setup.a);
  relief.on_relieve = [&] {
    held.Reset();
    return true;
  };
  setup.allocator.SetPressureRelief(&relief);
  EXPECT_EQ(setup.allocator.pressure_relief(), &relief);

  auto refused =
      setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, setup.b);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("memory budget"));
  EXPECT_TRUE(relief.calls.empty());
  EXPECT_TRUE(static_cast<bool>(held));
  setup.allocator.SetPressureRelief(nullptr);
}

TEST(AllocatorReliefTest, InsideAReliefScopeTheReliefHearsTheDeviceTheSizeAndTheAskingOwner) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  Buffer held = setup.Hold(768 * kAllocatorReliefTest_KiB, setup.a);
  setup.allocator.SetPressureRelief(&relief);
  {
    Allocator::ReliefScope scope;
    auto refused =
        setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, setup.b);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  }
  ASSERT_EQ(relief.calls.size(), 1u);  // false: not asked again
  EXPECT_EQ(relief.calls[0].device, Device::Cpu());
  EXPECT_EQ(relief.calls[0].size, 512 * kAllocatorReliefTest_KiB);
  EXPECT_EQ(relief.calls[0].asking, setup.b);
  EXPECT_EQ(setup.ledger.Stats(setup.b)->live_bytes,
            0);  // the refusal charged nothing
  setup.allocator.SetPressureRelief(nullptr);
}

TEST(AllocatorReliefTest, TheAskingOwnerIsTheThreadsOwnerScopeWhenNoneIsNamed) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  Buffer held = setup.Hold(768 * kAllocatorReliefTest_KiB, setup.a);
  setup.allocator.SetPressureRelief(&relief);
  {
    OwnerScope owner(setup.b);
    Allocator::ReliefScope scope;
    EXPECT_FALSE(setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB).ok());
  }
  ASSERT_EQ(relief.calls.size(), 1u);
  EXPECT_EQ(relief.calls[0].asking, setup.b);
  setup.allocator.SetPressureRelief(nullptr);
}

TEST(AllocatorReliefTest, AReliefThatFreesMemoryLetsTheAllocationSucceed) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  Buffer held = setup.Hold(768 * kAllocatorReliefTest_KiB, setup.a);
  relief.on_relieve = [&] {
    held.Reset();  // model a "falls asleep"
    return true;
  };
  setup.allocator.SetPressureRelief(&relief);
  Allocator::ReliefScope scope;
  auto made = setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, setup.b);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(relief.calls.size(), 1u);
  EXPECT_FALSE(static_cast<bool>(held));
  EXPECT_EQ(setup.ledger.Stats(setup.a)->live_bytes, 0);
  EXPECT_EQ(setup.ledger.Stats(setup.b)->live_bytes,
            static_cast<int64_t>(512 * kAllocatorReliefTest_KiB));
  made = Buffer();
  setup.allocator.SetPressureRelief(nullptr);
}

TEST(AllocatorReliefTest, TheAllocationIsTriedAgainAfterEachReliefUntilItFits) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  // Two idle models of 400 KiB: 700 KiB more fits only once both sleep.
  std::vector<Buffer> held;
  held.push_back(setup.Hold(400 * kAllocatorReliefTest_KiB, setup.a));
  held.push_back(setup.Hold(400 * kAllocatorReliefTest_KiB, setup.a));
  relief.on_relieve = [&] {
    if (held.empty()) return false;
    held.pop_back();
    return true;
  };
  setup.allocator.SetPressureRelief(&relief);
  Allocator::ReliefScope scope;
  auto made = setup.allocator.Allocate(Device::Cpu(), 700 * kAllocatorReliefTest_KiB, 0, setup.b);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(relief.calls.size(), 2u);
  EXPECT_TRUE(held.empty());
  made = Buffer();
  setup.allocator.SetPressureRelief(nullptr);
}

TEST(AllocatorReliefTest, AReliefThatCannotHelpLeavesTheAllocationFailingAfterOneCall) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  Buffer held = setup.Hold(768 * kAllocatorReliefTest_KiB, setup.a);
  relief.on_relieve = [] { return false; };
  setup.allocator.SetPressureRelief(&relief);
  Allocator::ReliefScope scope;
  auto refused =
      setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, setup.b);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("memory budget"));
  EXPECT_EQ(relief.calls.size(), 1u);
  EXPECT_TRUE(static_cast<bool>(held));
  setup.allocator.SetPressureRelief(nullptr);
}

TEST(AllocatorReliefTest, AModelsOwnQuotaIsNotRelieved) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  const OwnerId bounded = setup.ledger.OpenOwner(setup.ledger.root(), OwnerKind::kModel, "q",
                                                 {{Device::Cpu(), 256 * 1024}});
  setup.allocator.SetPressureRelief(&relief);
  Allocator::ReliefScope scope;
  // 512 KiB passes q's own 256 KiB, and the server's 1 MiB budget has room for
  // it.
  auto refused =
      setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, bounded);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), ::testing::Not(HasSubstr("memory budget")));
  EXPECT_TRUE(relief.calls.empty());
  setup.allocator.SetPressureRelief(nullptr);
}

TEST(AllocatorReliefTest, AModelsOwnQuotaIsNotRelievedEvenWhenTheBudgetIsPassedToo) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  Buffer held = setup.Hold(768 * kAllocatorReliefTest_KiB, setup.a);
  const OwnerId bounded = setup.ledger.OpenOwner(setup.ledger.root(), OwnerKind::kModel, "q",
                                                 {{Device::Cpu(), 256 * 1024}});
  relief.on_relieve = [&] {
    held.Reset();
    return true;
  };
  setup.allocator.SetPressureRelief(&relief);
  Allocator::ReliefScope scope;
  // 512 KiB passes both q's 256 KiB and what is left of the budget; sleeping
  // `a` would free the budget but never q's quota, so nothing is asked of the
  // relief.
  auto refused =
      setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, bounded);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("memory quota of"));
  EXPECT_TRUE(relief.calls.empty());
  EXPECT_TRUE(held);
  setup.allocator.SetPressureRelief(nullptr);
}

TEST(AllocatorReliefTest, WhatTheDeviceCannotGiveIsRelieved) {
  Ledger ledger;  // no budget: the pool refuses
  Allocator allocator(&ledger);
  const OwnerId a = ledger.OpenOwner(ledger.root(), OwnerKind::kModel, "a");
  AllocatorReliefTest_Relief relief;
  allocator.SetPressureRelief(&relief);
  Allocator::ReliefScope scope;
  auto huge = allocator.Allocate(Device::Cpu(), size_t{1} << 62, 0, a);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  ASSERT_EQ(relief.calls.size(), 1u);
  EXPECT_EQ(relief.calls[0].size, size_t{1} << 62);
  EXPECT_EQ(relief.calls[0].asking, a);
  allocator.SetPressureRelief(nullptr);
}

TEST(AllocatorReliefTest, RemovingTheReliefStopsTheCalls) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  Buffer held = setup.Hold(768 * kAllocatorReliefTest_KiB, setup.a);
  setup.allocator.SetPressureRelief(&relief);
  Allocator::ReliefScope scope;
  EXPECT_FALSE(
      setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, setup.b).ok());
  ASSERT_EQ(relief.calls.size(), 1u);

  setup.allocator.SetPressureRelief(nullptr);
  EXPECT_EQ(setup.allocator.pressure_relief(), nullptr);
  auto refused =
      setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, setup.b);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(relief.calls.size(), 1u);
}

TEST(AllocatorReliefTest, ReliefScopesNestAndBelongToTheirThread) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  Buffer held = setup.Hold(768 * kAllocatorReliefTest_KiB, setup.a);
  setup.allocator.SetPressureRelief(&relief);
  auto try_once = [&] {
    return setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, setup.b).ok();
  };
  {
    Allocator::ReliefScope outer;
    {
      Allocator::ReliefScope inner;
      EXPECT_FALSE(try_once());
    }
    EXPECT_EQ(relief.calls.size(), 1u);
    EXPECT_FALSE(try_once());  // still inside the outer scope
    EXPECT_EQ(relief.calls.size(), 2u);
    // Another thread is not inside this thread's scope.
    std::thread other([&] { EXPECT_FALSE(try_once()); });
    other.join();
    EXPECT_EQ(relief.calls.size(), 2u);
  }
  EXPECT_FALSE(try_once());
  EXPECT_EQ(relief.calls.size(), 2u);
  setup.allocator.SetPressureRelief(nullptr);
}

TEST(AllocatorReliefTest, AnAllocationTheReliefMakesIsNotRelievedInTurn) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  Buffer held = setup.Hold(768 * kAllocatorReliefTest_KiB, setup.a);
  Status inner = Status::Ok();
  relief.on_relieve = [&] {
    // A sleep that itself needs memory the budget refuses: it fails, without a
    // second call (which would also wait on the call in progress).
    auto made = setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, setup.a);
    inner = made.ok() ? Status::Ok() : made.status();
    return false;
  };
  setup.allocator.SetPressureRelief(&relief);
  Allocator::ReliefScope scope;
  EXPECT_FALSE(
      setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, setup.b).ok());
  EXPECT_EQ(relief.calls.size(), 1u);
  EXPECT_EQ(inner.code(), StatusCode::kResourceExhausted);
  // And the next allocation is relieved again.
  EXPECT_FALSE(
      setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, setup.b).ok());
  EXPECT_EQ(relief.calls.size(), 2u);
  setup.allocator.SetPressureRelief(nullptr);
}

TEST(AllocatorReliefTest, SetPressureReliefWaitsForACallInProgress) {
  AllocatorReliefTest_Setup setup;
  AllocatorReliefTest_Relief relief;
  Buffer held = setup.Hold(768 * kAllocatorReliefTest_KiB, setup.a);
  std::promise<void> relieving;
  std::promise<void> finish;
  std::shared_future<void> finished = finish.get_future().share();
  relief.on_relieve = [&] {
    relieving.set_value();
    finished.wait();
    return false;
  };
  setup.allocator.SetPressureRelief(&relief);
  std::future<bool> allocating = std::async(std::launch::async, [&] {
    Allocator::ReliefScope scope;
    return setup.allocator.Allocate(Device::Cpu(), 512 * kAllocatorReliefTest_KiB, 0, setup.b).ok();
  });
  ASSERT_EQ(relieving.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);

  std::future<void> removing =
      std::async(std::launch::async, [&] { setup.allocator.SetPressureRelief(nullptr); });
  EXPECT_EQ(removing.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  finish.set_value();
  ASSERT_EQ(removing.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  ASSERT_EQ(allocating.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_FALSE(allocating.get());
  EXPECT_EQ(relief.calls.size(), 1u);
  EXPECT_EQ(setup.allocator.pressure_relief(), nullptr);
}

}  // namespace
}  // namespace vramd::memory
