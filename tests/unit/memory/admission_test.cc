#include "memory/admission.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "memory/ledger.h"

namespace vramd::memory {
namespace {

using std::chrono::milliseconds;

const void* AdmissionAddr(uintptr_t n) {
  return reinterpret_cast<const void*>(0x20000000 + n * 256);
}

Ledger::Options BudgetOf1000() {
  Ledger::Options options;
  options.budget = {{Device::Cpu(), 1000}};
  return options;
}

Admission::Clock::time_point DeadlineIn(milliseconds ms) { return Admission::Clock::now() + ms; }

TEST(AdmissionTest, WithoutABudgetOrAPredictionEverythingStartsAtOnce) {
  Ledger ledger;
  Admission admission(&ledger);
  EXPECT_FALSE(admission.Governs(Device::Cpu()));
  EXPECT_TRUE(admission.Admit(Device::Cpu(), 1 << 30, kNoOwner, DeadlineIn(milliseconds(0)), "m").ok());
  Ledger budgeted(BudgetOf1000());
  Admission governed(&budgeted);
  EXPECT_TRUE(governed.Governs(Device::Cpu()));
  EXPECT_FALSE(governed.Governs(Device::Cuda(0)));
  auto unpredicted = governed.Admit(Device::Cpu(), 0, kNoOwner, DeadlineIn(milliseconds(0)), "m");
  ASSERT_TRUE(unpredicted.ok());
  EXPECT_TRUE(governed.Stats().at(0).admitted == 0);
}

// Admission reads an instance's rise (MadeSinceMark) and then the budget's use (BudgetOf), and
// counts a charge once if either shows it. So whenever the rise shows a charge, the use read
// after must show it too: a charge reaches the outer quotas before the inner ones. (Charged
// inner first, a reader between the two saw it in neither, and a CI run admitted one execution
// more than the budget held.) A race, so a stress: it may pass by luck on the old order, never
// fail on the right one.
TEST(AdmissionTest, AChargeSeenInAnInstancesRiseIsSeenInTheBudget) {
  Ledger::Options options;
  options.budget = {{Device::Cpu(), int64_t{1} << 30}};
  Ledger ledger(options);
  const OwnerId instance =
      ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "instance", MeasurePeaks());
  const OwnerId request = ledger.OpenOwner(instance, OwnerKind::kRequest, "request");
  ledger.MarkPeaks(instance);
  // Only charges while it is read (a free between the two readings is rightly counted in
  // neither): the use must never trail the rise.
  constexpr int kCharges = 200000;
  std::atomic<bool> done{false};
  std::thread charging([&] {
    for (int i = 0; i < kCharges; ++i) {
      ledger.RecordAllocation(AdmissionAddr(1000 + i), 1, Device::Cpu(), request);
    }
    done = true;
  });
  int64_t missed = 0;
  int64_t readings = 0;
  while (!done.load()) {
    const int64_t made = ledger.MadeSinceMark(instance, Device::Cpu());
    const int64_t used = ledger.BudgetOf(Device::Cpu()).first;
    ++readings;
    if (made > used) ++missed;
  }
  charging.join();
  EXPECT_EQ(missed, 0) << "of " << readings << " readings, the budget's use trailed the rise";
  EXPECT_EQ(ledger.BudgetOf(Device::Cpu()).first, kCharges);
  for (int i = 0; i < kCharges; ++i) ledger.RecordFree(AdmissionAddr(1000 + i));
  ledger.CloseOwner(request);
  ledger.CloseOwner(instance);
}

TEST(AdmissionTest, AnExecutionThatDoesNotFitWaitsForOneToEnd) {
  Ledger ledger(BudgetOf1000());
  Admission admission(&ledger);
  const OwnerId a = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "a", MeasurePeaks());
  const OwnerId b = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "b", MeasurePeaks());
  ledger.MarkPeaks(a);
  auto first = admission.Admit(Device::Cpu(), 600, a, DeadlineIn(milliseconds(1000)), "m");
  ASSERT_TRUE(first.ok());
  std::atomic<bool> second_started{false};
  std::thread second([&] {
    ledger.MarkPeaks(b);
    auto ticket = admission.Admit(Device::Cpu(), 600, b, DeadlineIn(milliseconds(10000)), "m");
    EXPECT_TRUE(ticket.ok()) << ticket.status().ToString();
    second_started = true;
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(second_started.load());  // 600 + 600 > 1000
  first->Release();
  second.join();
  EXPECT_TRUE(second_started.load());
  auto stats = admission.Stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].admitted, 2u);
  EXPECT_EQ(stats[0].waited, 1u);
  EXPECT_GT(stats[0].wait_ns, 0);
  EXPECT_EQ(stats[0].reserved_bytes, 0);
}

TEST(AdmissionTest, NothingIsAdmittedPastAWaiter) {
  // Two running executions leave room for a third of 300, but one of unknown size waits to
  // run alone: were later ones admitted beside the running ones, it could wait for ever.
  Ledger ledger(BudgetOf1000());
  Admission admission(&ledger);
  auto a = admission.Admit(Device::Cpu(), 300, kNoOwner, DeadlineIn(milliseconds(0)), "m");
  auto b = admission.Admit(Device::Cpu(), 300, kNoOwner, DeadlineIn(milliseconds(0)), "m");
  ASSERT_TRUE(a.ok() && b.ok());
  std::atomic<bool> alone_started{false};
  std::thread alone([&] {
    auto ticket = admission.Admit(Device::Cpu(), Ledger::kUnknownPeak, kNoOwner,
                                  DeadlineIn(milliseconds(10000)), "m");
    EXPECT_TRUE(ticket.ok()) << ticket.status().ToString();
    alone_started = true;
  });
  // Until the waiter is in line, a third fits (its ticket is given back at once).
  const auto until = Admission::Clock::now() + milliseconds(10000);
  while (admission.TryAdmit(Device::Cpu(), 300, kNoOwner).has_value()) {
    ASSERT_LT(Admission::Clock::now(), until) << "the waiter never held the others back";
    std::this_thread::yield();
  }
  auto behind = admission.Admit(Device::Cpu(), 300, kNoOwner, DeadlineIn(milliseconds(20)), "m");
  EXPECT_FALSE(behind.ok());  // it fits the budget, but waits its turn
  a->Release();
  EXPECT_FALSE(admission.TryAdmit(Device::Cpu(), 300, kNoOwner).has_value());
  EXPECT_FALSE(alone_started.load());
  b->Release();
  alone.join();
  EXPECT_TRUE(alone_started.load());
  EXPECT_EQ(admission.Stats()[0].waited, 1u);
}

TEST(AdmissionTest, ADeadlineThatComesFirstFailsNamingTheFigures) {
  Ledger ledger(BudgetOf1000());
  Admission admission(&ledger);
  const OwnerId a = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "a", MeasurePeaks());
  ledger.MarkPeaks(a);
  auto first = admission.Admit(Device::Cpu(), 600, a, DeadlineIn(milliseconds(1000)), "m");
  ASSERT_TRUE(first.ok());
  auto late = admission.Admit(Device::Cpu(), 500, kNoOwner, DeadlineIn(milliseconds(50)),
                              "model 'x' version 1");
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
  const std::string& m = late.status().message();
  EXPECT_NE(m.find("model 'x' version 1: an execution needing 500 B on cpu waited"),
            std::string::npos) << m;
  EXPECT_NE(m.find("the server holds 0 B of its 1000 B budget there and running executions are "
                   "predicted to make 600 B more"),
            std::string::npos) << m;
  EXPECT_EQ(admission.Stats()[0].timed_out, 1u);
}

TEST(AdmissionTest, WhatARunningExecutionAlreadyMadeIsNotCountedTwice) {
  Ledger ledger(BudgetOf1000());
  Admission admission(&ledger);
  const OwnerId a = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "a", MeasurePeaks());
  ledger.MarkPeaks(a);
  auto first = admission.Admit(Device::Cpu(), 600, a, DeadlineIn(milliseconds(1000)), "m");
  ASSERT_TRUE(first.ok());
  // It made 500 of its 600: the server holds 500, and it may make 100 more.
  ledger.RecordAllocation(AdmissionAddr(1), 500, Device::Cpu(), a);
  auto fits = admission.Admit(Device::Cpu(), 400, kNoOwner, DeadlineIn(milliseconds(0)), "m");
  EXPECT_TRUE(fits.ok()) << fits.status().ToString();  // 500 + 100 + 400 <= 1000
  auto does_not = admission.Admit(Device::Cpu(), 1, kNoOwner, DeadlineIn(milliseconds(0)), "m");
  EXPECT_FALSE(does_not.ok());
  ledger.RecordFree(AdmissionAddr(1));
}

TEST(AdmissionTest, PredictionsComeFromTheLearnedBatchSizes) {
  Ledger ledger;
  const OwnerId version = ledger.OpenOwner(kNoOwner, OwnerKind::kVersion, "1", MeasurePeaks());
  const OwnerId instance = ledger.OpenOwner(version, OwnerKind::kInstance, "i", MeasurePeaks());
  auto learn = [&](int64_t batch, size_t bytes, uintptr_t n) {
    ledger.MarkPeaks(instance);
    ledger.RecordAllocation(AdmissionAddr(n), bytes, Device::Cuda(0), instance);
    ledger.RecordFree(AdmissionAddr(n));
    ledger.LearnExecutionPeaks(instance, version, batch, Device::Cuda(0));
  };
  EXPECT_EQ(ledger.PredictExecutionPeak(version, Device::Cuda(0), 4), Ledger::kUnknownPeak);
  learn(4, 400, 1);
  learn(8, 1000, 2);
  EXPECT_EQ(ledger.PredictExecutionPeak(version, Device::Cuda(0), 4), 400);
  EXPECT_EQ(ledger.PredictExecutionPeak(version, Device::Cuda(0), 2), 400);    // next larger
  EXPECT_EQ(ledger.PredictExecutionPeak(version, Device::Cuda(0), 6), 1000);   // next larger
  EXPECT_EQ(ledger.PredictExecutionPeak(version, Device::Cuda(0), 16), 2000);  // scaled up
  // What was seen, never scaled: what a split may count on (LoadedModel::PrefixThatFits).
  EXPECT_EQ(ledger.LearnedExecutionPeak(version, Device::Cuda(0), 6), 1000);
  EXPECT_EQ(ledger.LearnedExecutionPeak(version, Device::Cuda(0), 16), Ledger::kUnknownPeak);
  EXPECT_EQ(ledger.PredictExecutionPeak(version, Device::Cuda(1), 4), Ledger::kUnknownPeak);
  EXPECT_EQ(ledger.PredictExecutionPeak(version, Device::Cpu(), 4), Ledger::kUnknownPeak);
}

TEST(AdmissionTest, AnExecutionOfUnknownSizeRunsAloneAndNothingRunsBesideIt) {
  Ledger::Options options;
  options.budget = {{Device::Cpu(), 1000}};
  Ledger ledger(options);
  Admission admission(&ledger);
  {
    auto first = admission.Admit(Device::Cpu(), 100, kNoOwner, DeadlineIn(milliseconds(0)), "m");
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    // Unknown, with another running: it waits (here, its deadline is now).
    auto unknown = admission.Admit(Device::Cpu(), Ledger::kUnknownPeak, kNoOwner,
                                   DeadlineIn(milliseconds(0)), "m");
    ASSERT_FALSE(unknown.ok());
    EXPECT_NE(unknown.status().message().find("an unknown amount"), std::string::npos);
  }
  auto alone = admission.Admit(Device::Cpu(), Ledger::kUnknownPeak, kNoOwner,
                               DeadlineIn(milliseconds(0)), "m");
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();  // nothing else runs
  // While it runs, even a small known execution waits.
  auto small = admission.Admit(Device::Cpu(), 1, kNoOwner, DeadlineIn(milliseconds(0)), "m");
  EXPECT_FALSE(small.ok());
  alone->Release();
  auto after = admission.Admit(Device::Cpu(), 1, kNoOwner, DeadlineIn(milliseconds(0)), "m");
  EXPECT_TRUE(after.ok()) << after.status().ToString();
}

// A GPU without a budget, admitted against what it has free (the driver's free memory and the
// pool's cached free, read by the server's DeviceFree): an execution waits while the running
// ones are still predicted to make what would leave it too little, and a deadline that comes
// first names the free figure.
TEST(AdmissionTest, WithoutABudgetAGpuIsAdmittedAgainstWhatItHasFree) {
  Ledger ledger;
  std::atomic<int64_t> free_bytes{1000};
  Admission admission(&ledger, nullptr, [&](Device d) -> std::optional<int64_t> {
    if (d != Device::Cuda(0)) return std::nullopt;
    return free_bytes.load();
  });
  EXPECT_TRUE(admission.Governs(Device::Cuda(0)));
  EXPECT_FALSE(admission.Governs(Device::Cpu())) << "the host is not admitted against free memory";
  EXPECT_TRUE(admission.Stats().empty()) << "no GPU admitted anything yet";
  const OwnerId a = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "a", MeasurePeaks());
  const OwnerId b = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "b", MeasurePeaks());
  ledger.MarkPeaks(a);
  auto first = admission.Admit(Device::Cuda(0), 600, a, DeadlineIn(milliseconds(1000)), "m");
  ASSERT_TRUE(first.ok());
  // 600 still to make + 600 > 1000 free: it waits, then its deadline comes.
  auto late = admission.Admit(Device::Cuda(0), 600, b, DeadlineIn(milliseconds(50)),
                              "model 'x' version 1");
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(late.status().message().find("the device has 1000 B free"), std::string::npos)
      << late.status().message();
  // The first one made 500 of its 600 (the driver's free memory fell by that): 100 still to
  // make + 400 fits the 500 left.
  ledger.RecordAllocation(AdmissionAddr(1), 500, Device::Cuda(0), a);
  free_bytes = 500;
  ledger.MarkPeaks(b);
  auto fits = admission.Admit(Device::Cuda(0), 400, b, DeadlineIn(milliseconds(0)), "m");
  EXPECT_TRUE(fits.ok()) << fits.status().ToString();
  // Another process took memory: 300 no longer fits beside them; it starts once they end.
  free_bytes = 200;
  std::atomic<bool> started{false};
  std::thread third([&] {
    auto ticket = admission.Admit(Device::Cuda(0), 300, kNoOwner, DeadlineIn(milliseconds(10000)), "m");
    EXPECT_TRUE(ticket.ok()) << ticket.status().ToString();
    started = true;
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(started.load());
  ledger.RecordFree(AdmissionAddr(1));
  free_bytes = 1000;
  first->Release();
  fits->Release();
  third.join();
  EXPECT_TRUE(started.load());
  auto stats = admission.Stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].device, Device::Cuda(0));
  EXPECT_EQ(stats[0].timed_out, 1u);
  EXPECT_EQ(stats[0].waited, 1u);
  // What one execution could make alone: what is free plus what the admitted ones made (it
  // comes back when they end); -1 where the device cannot say.
  {
    ledger.MarkPeaks(a);
    auto running = admission.Admit(Device::Cuda(0), 600, a, DeadlineIn(milliseconds(0)), "m");
    ASSERT_TRUE(running.ok());
    ledger.RecordAllocation(AdmissionAddr(2), 300, Device::Cuda(0), a);
    free_bytes = 700;
    EXPECT_EQ(admission.RoomAlone(Device::Cuda(0)), 1000);
    ledger.RecordFree(AdmissionAddr(2));
  }
  // Where the device cannot say, nothing waits.
  Admission blind(&ledger, nullptr, [](Device) -> std::optional<int64_t> { return std::nullopt; });
  auto held = blind.Admit(Device::Cuda(0), 600, a, DeadlineIn(milliseconds(0)), "m");
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE(blind.Admit(Device::Cuda(0), 600, b, DeadlineIn(milliseconds(0)), "m").ok());
}

TEST(AdmissionTest, RoomAloneIsTheBudgetLessWhatIsHeldOutsideRunningExecutions) {
  Ledger ledger(BudgetOf1000());
  Admission admission(&ledger);
  EXPECT_EQ(admission.RoomAlone(Device::Cuda(0)), -1) << "not governed";
  const OwnerId a = ledger.OpenOwner(kNoOwner, OwnerKind::kInstance, "a", MeasurePeaks());
  ledger.RecordAllocation(AdmissionAddr(1), 100, Device::Cpu());  // held by the server
  EXPECT_EQ(admission.RoomAlone(Device::Cpu()), 900);
  ledger.MarkPeaks(a);
  auto running = admission.Admit(Device::Cpu(), 500, a, DeadlineIn(milliseconds(0)), "m");
  ASSERT_TRUE(running.ok());
  ledger.RecordAllocation(AdmissionAddr(2), 400, Device::Cpu(), a);  // goes when it ends
  EXPECT_EQ(admission.RoomAlone(Device::Cpu()), 900);
  admission.CountSplit(Device::Cpu());
  EXPECT_EQ(admission.Stats().at(0).splits, 1u);
  ledger.RecordFree(AdmissionAddr(2));
  ledger.RecordFree(AdmissionAddr(1));
}

}  // namespace
}  // namespace vramd::memory
