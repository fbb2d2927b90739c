// SleepGate: executions pass only while the version is awake, and its sleep and wake run only
// while none is inside (docs/memory.md, "Sleeping models").
#include "runtime/sleep_gate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace vramd::runtime {
namespace {

using ::testing::HasSubstr;
using backends::SleepLevel;
using std::chrono::milliseconds;

// How long a test watches a thread to see that it is still waiting: long enough that a thread
// that should not wait would have finished on a loaded machine, short enough to keep tests fast.
constexpr milliseconds kSleepGateTest_StillWaiting{50};
// A bound on a wait that should end, so that a bug fails the test rather than hanging it.
constexpr milliseconds kSleepGateTest_Bound{5000};

SleepGate::Clock::time_point SleepGateTest_Far() {
  return SleepGate::Clock::now() + std::chrono::seconds(30);
}

// A backend model's sleep and wake, counted; `sleep_hook` and `wake_hook` (set before the gate
// is used) say what they answer and may block.
struct SleepGateTest_Backend {
  std::atomic<int> sleeps{0};
  std::atomic<int> wakes{0};
  std::atomic<int> last_level{0};
  std::function<Status(SleepLevel)> sleep_hook;
  std::function<Status()> wake_hook;

  SleepGate::Actions Actions() {
    return SleepGate::Actions{
        "model 'm' version 1",
        [this](SleepLevel level) {
          ++sleeps;
          last_level = static_cast<int>(level);
          return sleep_hook ? sleep_hook(level) : Status::Ok();
        },
        [this] {
          ++wakes;
          return wake_hook ? wake_hook() : Status::Ok();
        }};
  }
};

TEST(SleepGateTest, EnterOnAnAwakeGatePassesAtOnce) {
  SleepGateTest_Backend backend;
  SleepGate gate(backend.Actions());
  EXPECT_TRUE(gate.can_sleep());
  EXPECT_EQ(gate.state(), SleepGate::State::kAwake);
  auto pass = gate.Enter();
  ASSERT_TRUE(pass.ok()) << pass.status().ToString();
  auto second = gate.Enter();  // several executions may be inside at once
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(backend.wakes, 0);
  EXPECT_EQ(backend.sleeps, 0);
  EXPECT_EQ(gate.state(), SleepGate::State::kAwake);
  EXPECT_EQ(gate.counters().wakes, 0u);
}

TEST(SleepGateTest, SleepCallsTheSleepActionOnceAndTheGateIsAsleep) {
  SleepGateTest_Backend backend;
  SleepGate gate(backend.Actions());
  const auto before = SleepGate::Clock::now();
  ASSERT_TRUE(gate.Sleep(SleepLevel::kDiscard, SleepGateTest_Far()).ok());
  EXPECT_EQ(backend.sleeps, 1);
  EXPECT_EQ(backend.last_level, static_cast<int>(SleepLevel::kDiscard));
  EXPECT_EQ(gate.state(), SleepGate::State::kAsleep);
  EXPECT_EQ(gate.level(), SleepLevel::kDiscard);
  EXPECT_GE(gate.asleep_since(), before);
  EXPECT_EQ(backend.wakes, 0);
}

TEST(SleepGateTest, ASecondSleepIsOkWithoutCallingTheActionAgain) {
  SleepGateTest_Backend backend;
  SleepGate gate(backend.Actions());
  ASSERT_TRUE(gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far()).ok());
  const auto since = gate.asleep_since();
  Status again = gate.Sleep(SleepLevel::kDiscard, SleepGateTest_Far());
  EXPECT_TRUE(again.ok()) << again.ToString();
  EXPECT_EQ(backend.sleeps, 1);
  EXPECT_EQ(gate.counters().sleeps, 1u);
  EXPECT_EQ(gate.state(), SleepGate::State::kAsleep);
  EXPECT_EQ(gate.level(), SleepLevel::kHostCopy);  // the sleep that was done
  EXPECT_EQ(gate.asleep_since(), since);
}

TEST(SleepGateTest, EnterOnAnAsleepGateWakesItOnTheEnteringThreadOnce) {
  SleepGateTest_Backend backend;
  std::thread::id woken_on;
  backend.wake_hook = [&] {
    woken_on = std::this_thread::get_id();
    return Status::Ok();
  };
  SleepGate gate(backend.Actions());
  ASSERT_TRUE(gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far()).ok());

  std::thread::id entering;
  bool entered = false;
  std::thread thread([&] {
    entering = std::this_thread::get_id();
    auto pass = gate.Enter();
    entered = pass.ok();
  });
  thread.join();
  EXPECT_TRUE(entered);
  EXPECT_EQ(backend.wakes, 1);
  EXPECT_EQ(woken_on, entering);
  EXPECT_NE(woken_on, std::this_thread::get_id());
  EXPECT_EQ(gate.state(), SleepGate::State::kAwake);

  // Awake now: the next entry does not wake it again.
  auto pass = gate.Enter();
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(backend.wakes, 1);
  EXPECT_EQ(gate.counters().wakes, 1u);
}

TEST(SleepGateTest, ThreadsEnteringASleepingGateTogetherWakeItOnce) {
  constexpr int kThreads = 8;
  SleepGateTest_Backend backend;
  std::promise<void> wake_started;
  std::promise<void> release_wake;
  std::shared_future<void> released = release_wake.get_future().share();
  backend.wake_hook = [&] {
    if (backend.wakes == 1) wake_started.set_value();
    released.wait();
    return Status::Ok();
  };
  SleepGate gate(backend.Actions());
  ASSERT_TRUE(gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far()).ok());

  std::latch start(kThreads);
  std::promise<void> first_passed;
  std::once_flag first_passed_once;
  std::atomic<int> passed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      auto pass = gate.Enter();
      if (!pass.ok()) return;
      ++passed;
      std::call_once(first_passed_once, [&] { first_passed.set_value(); });
    });
  }
  ASSERT_EQ(wake_started.get_future().wait_for(kSleepGateTest_Bound), std::future_status::ready);
  // While the wake runs, no entry passes.
  std::future<void> any_passed = first_passed.get_future();
  EXPECT_EQ(any_passed.wait_for(kSleepGateTest_StillWaiting), std::future_status::timeout);
  EXPECT_EQ(gate.state(), SleepGate::State::kWaking);
  release_wake.set_value();
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(passed, kThreads);
  EXPECT_EQ(backend.wakes, 1);
  EXPECT_EQ(gate.counters().wakes, 1u);
  EXPECT_EQ(gate.state(), SleepGate::State::kAwake);
  // Every pass was given back: the gate is idle.
  EXPECT_TRUE(gate.TrySleepIfIdle(SleepLevel::kHostCopy));
}

TEST(SleepGateTest, AFailedWakeFailsTheEntryLeavesItAsleepAndTheNextEntryTriesAgain) {
  SleepGateTest_Backend backend;
  backend.wake_hook = [&] {
    if (backend.wakes == 1) return Status::Internal("the device is gone");
    return Status::Ok();
  };
  SleepGate gate(backend.Actions());
  ASSERT_TRUE(gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far()).ok());

  auto failed = gate.Enter();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInternal);
  EXPECT_THAT(failed.status().message(), HasSubstr("the device is gone"));
  EXPECT_EQ(backend.wakes, 1);
  EXPECT_EQ(gate.state(), SleepGate::State::kAsleep);
  EXPECT_EQ(gate.counters().failed_wakes, 1u);
  EXPECT_EQ(gate.counters().wakes, 0u);

  auto pass = gate.Enter();
  ASSERT_TRUE(pass.ok()) << pass.status().ToString();
  EXPECT_EQ(backend.wakes, 2);
  EXPECT_EQ(gate.state(), SleepGate::State::kAwake);
  EXPECT_EQ(gate.counters().wakes, 1u);
  EXPECT_EQ(gate.counters().failed_wakes, 1u);
}

TEST(SleepGateTest, AFailedSleepLeavesTheGateAwake) {
  SleepGateTest_Backend backend;
  backend.sleep_hook = [](SleepLevel) { return Status::Internal("cannot copy to host"); };
  SleepGate gate(backend.Actions());
  Status slept = gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far());
  ASSERT_FALSE(slept.ok());
  EXPECT_EQ(slept.code(), StatusCode::kInternal);
  EXPECT_THAT(slept.message(), HasSubstr("cannot copy to host"));
  EXPECT_EQ(backend.sleeps, 1);
  EXPECT_EQ(gate.state(), SleepGate::State::kAwake);
  EXPECT_EQ(gate.counters().sleeps, 0u);
  // Awake: entries pass without a wake.
  auto pass = gate.Enter();
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(backend.wakes, 0);
  // TrySleepIfIdle reports the failure as false, and the gate stays awake too.
  pass = SleepGate::Pass();
  EXPECT_FALSE(gate.TrySleepIfIdle(SleepLevel::kHostCopy));
  EXPECT_EQ(backend.sleeps, 2);
  EXPECT_EQ(gate.state(), SleepGate::State::kAwake);
}

TEST(SleepGateTest, SleepWaitsForAPassHeldByAnotherThread) {
  SleepGateTest_Backend backend;
  SleepGate gate(backend.Actions());
  std::promise<void> entered;
  std::promise<void> release;
  std::thread holder([&] {
    auto pass = gate.Enter();
    ASSERT_TRUE(pass.ok());
    entered.set_value();
    release.get_future().wait();
  });  // the pass is given back as the thread ends
  ASSERT_EQ(entered.get_future().wait_for(kSleepGateTest_Bound), std::future_status::ready);

  std::future<Status> sleeping = std::async(std::launch::async, [&] {
    return gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far());
  });
  EXPECT_EQ(sleeping.wait_for(kSleepGateTest_StillWaiting), std::future_status::timeout);
  EXPECT_EQ(backend.sleeps, 0);  // not while an execution is inside

  release.set_value();
  holder.join();
  ASSERT_EQ(sleeping.wait_for(kSleepGateTest_Bound), std::future_status::ready);
  Status slept = sleeping.get();
  EXPECT_TRUE(slept.ok()) << slept.ToString();
  EXPECT_EQ(backend.sleeps, 1);
  EXPECT_EQ(gate.state(), SleepGate::State::kAsleep);
}

TEST(SleepGateTest, SleepGivesUpAtItsDeadlineAndTheGateIsAwakeAgain) {
  SleepGateTest_Backend backend;
  SleepGate gate(backend.Actions());
  auto held = gate.Enter();
  ASSERT_TRUE(held.ok());

  const auto start = SleepGate::Clock::now();
  Status slept = gate.Sleep(SleepLevel::kHostCopy, start + milliseconds(30));
  EXPECT_GE(SleepGate::Clock::now() - start, milliseconds(30));  // it did wait for the deadline
  ASSERT_FALSE(slept.ok());
  EXPECT_EQ(slept.code(), StatusCode::kUnavailable);
  EXPECT_THAT(slept.message(), HasSubstr("model 'm' version 1"));
  EXPECT_THAT(slept.message(), HasSubstr("1 execution(s) still running"));
  EXPECT_EQ(backend.sleeps, 0);
  EXPECT_EQ(gate.state(), SleepGate::State::kAwake);

  // Entries pass again, from another thread as from this one, without a wake.
  std::future<bool> other =
      std::async(std::launch::async, [&] { return gate.Enter().ok(); });
  ASSERT_EQ(other.wait_for(kSleepGateTest_Bound), std::future_status::ready);
  EXPECT_TRUE(other.get());
  auto pass = gate.Enter();
  EXPECT_TRUE(pass.ok());
  EXPECT_EQ(backend.wakes, 0);

  // Once they have left, it sleeps.
  held = SleepGate::Pass();
  pass = SleepGate::Pass();
  EXPECT_TRUE(gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far()).ok());
  EXPECT_EQ(backend.sleeps, 1);
}

TEST(SleepGateTest, AnEntryDuringASleepWaitsForItAndThenWakesTheVersion) {
  SleepGateTest_Backend backend;
  std::promise<void> sleeping_started;
  std::promise<void> release_sleep;
  std::shared_future<void> released = release_sleep.get_future().share();
  backend.sleep_hook = [&](SleepLevel) {
    sleeping_started.set_value();
    released.wait();
    return Status::Ok();
  };
  SleepGate gate(backend.Actions());
  std::future<Status> sleeping = std::async(std::launch::async, [&] {
    return gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far());
  });
  ASSERT_EQ(sleeping_started.get_future().wait_for(kSleepGateTest_Bound),
            std::future_status::ready);
  EXPECT_EQ(gate.state(), SleepGate::State::kFallingAsleep);
  // Nothing else sleeps it meanwhile.
  EXPECT_FALSE(gate.TrySleepIfIdle(SleepLevel::kHostCopy));

  std::future<bool> entering =
      std::async(std::launch::async, [&] { return gate.Enter().ok(); });
  EXPECT_EQ(entering.wait_for(kSleepGateTest_StillWaiting), std::future_status::timeout);
  EXPECT_EQ(backend.wakes, 0);

  release_sleep.set_value();
  ASSERT_EQ(sleeping.wait_for(kSleepGateTest_Bound), std::future_status::ready);
  EXPECT_TRUE(sleeping.get().ok());
  ASSERT_EQ(entering.wait_for(kSleepGateTest_Bound), std::future_status::ready);
  EXPECT_TRUE(entering.get());
  EXPECT_EQ(backend.sleeps, 1);
  EXPECT_EQ(backend.wakes, 1);  // the entry woke what had just fallen asleep
  EXPECT_EQ(gate.state(), SleepGate::State::kAwake);
}

TEST(SleepGateTest, TrySleepIfIdleSleepsOnlyAnIdleAwakeGate) {
  SleepGateTest_Backend backend;
  SleepGate gate(backend.Actions());
  {
    auto pass = gate.Enter();
    ASSERT_TRUE(pass.ok());
    EXPECT_FALSE(gate.TrySleepIfIdle(SleepLevel::kHostCopy));  // never waits for it
    EXPECT_EQ(backend.sleeps, 0);
    EXPECT_EQ(gate.state(), SleepGate::State::kAwake);
  }
  EXPECT_TRUE(gate.TrySleepIfIdle(SleepLevel::kDiscard));
  EXPECT_EQ(backend.sleeps, 1);
  EXPECT_EQ(backend.last_level, static_cast<int>(SleepLevel::kDiscard));
  EXPECT_EQ(gate.state(), SleepGate::State::kAsleep);
  EXPECT_EQ(gate.level(), SleepLevel::kDiscard);
  // Asleep already: not put to sleep "now".
  EXPECT_FALSE(gate.TrySleepIfIdle(SleepLevel::kDiscard));
  EXPECT_EQ(backend.sleeps, 1);
  EXPECT_EQ(gate.counters().sleeps, 1u);
}

TEST(SleepGateTest, AGateWithoutASleepActionCannotSleep) {
  SleepGate gate(SleepGate::Actions{"model 'plain' version 1", nullptr, nullptr});
  EXPECT_FALSE(gate.can_sleep());
  Status slept = gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far());
  ASSERT_FALSE(slept.ok());
  EXPECT_EQ(slept.code(), StatusCode::kUnsupported);
  EXPECT_THAT(slept.message(), HasSubstr("model 'plain' version 1"));
  EXPECT_FALSE(gate.TrySleepIfIdle(SleepLevel::kHostCopy));
  EXPECT_EQ(gate.state(), SleepGate::State::kAwake);
  auto pass = gate.Enter();
  EXPECT_TRUE(pass.ok());
  EXPECT_TRUE(gate.Wake().ok());  // awake: nothing to do
  EXPECT_EQ(gate.counters().sleeps, 0u);
}

TEST(SleepGateTest, CountersCountSleepsWakesAndFailedWakes) {
  SleepGateTest_Backend backend;
  backend.wake_hook = [&] {
    if (backend.wakes == 2) return Status::Internal("wake failed");
    return Status::Ok();
  };
  SleepGate gate(backend.Actions());
  ASSERT_TRUE(gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far()).ok());
  ASSERT_TRUE(gate.Enter().ok());  // wake 1
  ASSERT_TRUE(gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far()).ok());
  EXPECT_FALSE(gate.Wake().ok());  // wake 2 fails
  EXPECT_EQ(gate.state(), SleepGate::State::kAsleep);
  ASSERT_TRUE(gate.Wake().ok());  // wake 3
  EXPECT_TRUE(gate.TrySleepIfIdle(SleepLevel::kHostCopy));

  const SleepGate::Counters counters = gate.counters();
  EXPECT_EQ(counters.sleeps, 3u);
  EXPECT_EQ(counters.wakes, 2u);
  EXPECT_EQ(counters.failed_wakes, 1u);
  EXPECT_GE(counters.sleep_seconds, 0.0);
  EXPECT_GE(counters.wake_seconds, counters.last_wake_seconds);
  EXPECT_EQ(backend.sleeps, 3);
  EXPECT_EQ(backend.wakes, 3);
}

TEST(SleepGateTest, WakeWakesASleepingGateAndIsOkOnAnAwakeOne) {
  SleepGateTest_Backend backend;
  SleepGate gate(backend.Actions());
  EXPECT_TRUE(gate.Wake().ok());
  EXPECT_EQ(backend.wakes, 0);
  ASSERT_TRUE(gate.Sleep(SleepLevel::kHostCopy, SleepGateTest_Far()).ok());
  const auto before = SleepGate::Clock::now();
  EXPECT_TRUE(gate.Wake().ok());
  EXPECT_EQ(backend.wakes, 1);
  EXPECT_EQ(gate.state(), SleepGate::State::kAwake);
  EXPECT_GE(gate.last_used(), before);  // a wake counts as a use
  auto pass = gate.Enter();
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(backend.wakes, 1);
}

TEST(SleepGateTest, LastUsedAdvancesWhenAPassIsReleased) {
  SleepGateTest_Backend backend;
  SleepGate gate(backend.Actions());
  const auto made = gate.last_used();
  auto pass = gate.Enter();
  ASSERT_TRUE(pass.ok());
  EXPECT_EQ(gate.last_used(), made);  // entering is not leaving
  const auto before_release = SleepGate::Clock::now();
  ASSERT_GT(before_release, made);
  pass = Result<SleepGate::Pass>(SleepGate::Pass());  // gives the pass back
  EXPECT_GE(gate.last_used(), before_release);
  EXPECT_GT(gate.last_used(), made);
}

TEST(SleepGateTest, AMovedPassLeavesTheGateOnce) {
  SleepGateTest_Backend backend;
  SleepGate gate(backend.Actions());
  auto entered = gate.Enter();
  ASSERT_TRUE(entered.ok());
  std::optional<SleepGate::Pass> moved(std::move(*entered));
  entered = Result<SleepGate::Pass>(SleepGate::Pass());  // the moved-from pass: leaves nothing
  EXPECT_FALSE(gate.TrySleepIfIdle(SleepLevel::kHostCopy));  // still inside
  SleepGate::Pass assigned;
  assigned = std::move(*moved);
  moved.reset();
  EXPECT_FALSE(gate.TrySleepIfIdle(SleepLevel::kHostCopy));
  assigned = SleepGate::Pass();  // leaves now, once
  EXPECT_TRUE(gate.TrySleepIfIdle(SleepLevel::kHostCopy));
  EXPECT_EQ(backend.sleeps, 1);
  // Had a pass left twice, the count inside would be negative and Sleep would not wait for
  // the next entry; it must.
  ASSERT_TRUE(gate.Wake().ok());
  auto held = gate.Enter();
  ASSERT_TRUE(held.ok());
  EXPECT_FALSE(gate.TrySleepIfIdle(SleepLevel::kHostCopy));
}

}  // namespace
}  // namespace vramd::runtime
