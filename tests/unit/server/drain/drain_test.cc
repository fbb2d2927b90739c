#include "server/drain/drain.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace vramd::server {
namespace {

using std::chrono::milliseconds;

TEST(DrainTest, NotDrainingUntilBegun) {
  Drain drain;
  drain.RequestStarted();
  EXPECT_FALSE(drain.draining());
  EXPECT_EQ(drain.in_flight(), 1u);
  drain.RequestEnded();
  EXPECT_EQ(drain.in_flight(), 0u);
  drain.Begin();
  EXPECT_TRUE(drain.draining());
}

TEST(DrainTest, IdleServerIsQuietAfterTheWindow) {
  Drain drain;
  const auto start = Drain::Clock::now();
  const Drain::Outcome outcome = drain.BeginAndWait(milliseconds(50), milliseconds(5000));
  EXPECT_TRUE(outcome.quiet);
  EXPECT_EQ(outcome.in_flight, 0u);
  EXPECT_GE(Drain::Clock::now() - start, milliseconds(50));
  EXPECT_GE(outcome.waited, milliseconds(50));
}

TEST(DrainTest, RequestInFlightHoldsTheDrainUntilTimeout) {
  Drain drain;
  drain.RequestStarted();
  const Drain::Outcome outcome = drain.BeginAndWait(milliseconds(10), milliseconds(100));
  EXPECT_FALSE(outcome.quiet);
  EXPECT_EQ(outcome.in_flight, 1u);
  EXPECT_GE(outcome.waited, milliseconds(100));
  drain.RequestEnded();
}

TEST(DrainTest, QuietWindowCountsFromTheLastRequestsEnd) {
  Drain drain;
  drain.RequestStarted();
  std::thread finisher([&] {
    std::this_thread::sleep_for(milliseconds(80));
    drain.RequestEnded();
  });
  const auto start = Drain::Clock::now();
  const Drain::Outcome outcome = drain.BeginAndWait(milliseconds(60), milliseconds(5000));
  finisher.join();
  EXPECT_TRUE(outcome.quiet);
  // The request ended at ~80 ms; quiet only 60 ms after that.
  EXPECT_GE(Drain::Clock::now() - start, milliseconds(140));
}

TEST(DrainTest, ARequestArrivingDuringTheWindowRestartsIt) {
  Drain drain;
  std::thread client([&] {
    while (!drain.draining()) std::this_thread::yield();  // inside the window, not before it
    std::this_thread::sleep_for(milliseconds(40));
    drain.RequestStarted();
    drain.RequestEnded();
  });
  const auto start = Drain::Clock::now();
  const Drain::Outcome outcome = drain.BeginAndWait(milliseconds(80), milliseconds(5000));
  client.join();
  EXPECT_TRUE(outcome.quiet);
  EXPECT_GE(Drain::Clock::now() - start, milliseconds(120));
}

TEST(DrainTest, EndsRequestCountsDownOnce) {
  Drain drain;
  drain.RequestStarted();
  { EndsRequest ends(&drain); }
  EXPECT_EQ(drain.in_flight(), 0u);
  { EndsRequest nothing(nullptr); }  // a front end without a drain
}

}  // namespace
}  // namespace vramd::server
