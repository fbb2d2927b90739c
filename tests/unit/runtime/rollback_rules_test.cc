#include "runtime/rollback_rules.h"

#include <gtest/gtest.h>

namespace vramd::runtime {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = RollbackWatch::Clock;

config::ModelConfig WithParameters(
    std::initializer_list<std::pair<const char*, const char*>> parameters) {
  config::ModelConfig c;
  for (const auto& [k, v] : parameters) (*c.mutable_parameters())[k].set_string_value(v);
  return c;
}

// Feeds a watch as the monitor does: cumulative counts, one sample per request here.
class Feed {
 public:
  explicit Feed(RollbackWatch* watch, Clock::time_point t0) : watch_(watch) {
    watch_->OnSample(t0, counts_);  // the baseline
  }
  void Request(Clock::time_point at, bool ok, milliseconds latency) {
    ++counts_.requests;
    if (!ok) ++counts_.errors;
    ++counts_.latency[LatencyHistogram::BucketOf(
        static_cast<uint64_t>(std::chrono::nanoseconds(latency).count()))];
    watch_->OnSample(at, counts_);
  }

 private:
  RollbackWatch* watch_;
  RollbackWatch::RequestSample counts_;
};

RollbackSettings Settings(std::initializer_list<std::pair<const char*, const char*>> p) {
  auto s = RollbackSettingsFromConfig(WithParameters(p));
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : RollbackSettings();
}

TEST(RollbackSettingsTest, OffUnlessAsked) {
  auto s = RollbackSettingsFromConfig(config::ModelConfig());
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->enabled);
}

TEST(RollbackSettingsTest, ParsesSharesAndRefusesNonsense) {
  RollbackSettings s = Settings({{"vramd.rollback.error_rate", "5%"},
                                 {"vramd.rollback.gpu_util", "0.95"},
                                 {"vramd.rollback.error_window_s", "10"}});
  EXPECT_TRUE(s.enabled);
  EXPECT_DOUBLE_EQ(*s.max_error_rate, 0.05);
  EXPECT_DOUBLE_EQ(*s.max_gpu_util, 0.95);
  EXPECT_EQ(s.window, seconds(10));
  for (auto bad : std::initializer_list<std::pair<const char*, const char*>>{
           {"vramd.rollback.error_rate", "150%"},
           {"vramd.rollback.error_rate", "lots"},
           {"vramd.rollback.p99_ms", "-3"},
           {"vramd.rollback.on_oom", "yes"},
           {"vramd.rollback.typo", "1"},
           {"vramd.rollback.error_window_s", "9999"}}) {
    auto r = RollbackSettingsFromConfig(WithParameters({bad}));
    ASSERT_FALSE(r.ok()) << bad.first << "=" << bad.second;
    EXPECT_NE(r.status().message().find(bad.first), std::string::npos) << r.status().message();
  }
}

TEST(RollbackSettingsTest, KeepAndFallbackModel) {
  RollbackSettings plain = Settings({{"vramd.rollback.watch_s", "30"}});
  EXPECT_EQ(plain.keep, RollbackKeep::kWarm);
  EXPECT_TRUE(plain.fallback_model.empty());
  RollbackSettings s = Settings({{"vramd.rollback.keep", "asleep"},
                                 {"vramd.rollback.fallback_model", "stable"}});
  EXPECT_EQ(s.keep, RollbackKeep::kAsleep);
  EXPECT_STREQ(RollbackKeepName(s.keep), "asleep");
  EXPECT_EQ(s.fallback_model, "stable");
  EXPECT_EQ(Settings({{"vramd.rollback.keep", "reload"}}).keep, RollbackKeep::kReload);
  config::ModelConfig self = WithParameters({{"vramd.rollback.fallback_model", "m"}});
  self.set_name("m");
  for (const config::ModelConfig& bad :
       {WithParameters({{"vramd.rollback.keep", "cold"}}),
        WithParameters({{"vramd.rollback.fallback_model", ""}}),
        WithParameters({{"vramd.rollback.fallback_model", "a/b"}}), self}) {
    auto r = RollbackSettingsFromConfig(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("vramd.rollback."), std::string::npos)
        << r.status().message();
  }
}

TEST(RollbackWatchTest, ErrorRateFiresOnlyOnAWholeWindowWithEnoughRequests) {
  const auto t0 = Clock::now();
  RollbackWatch w(Settings({{"vramd.rollback.error_rate", "10%"},
                            {"vramd.rollback.error_window_s", "5"},
                            {"vramd.rollback.min_requests", "10"}}),
                  t0);
  Feed feed(&w, t0);
  // Every request fails from the start, but the window is not whole before 5 s.
  for (int i = 0; i < 40; ++i) feed.Request(t0 + milliseconds(100 * i), false, milliseconds(1));
  EXPECT_FALSE(w.Check(t0 + milliseconds(4000)));
  auto verdict = w.Check(t0 + milliseconds(5000));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->rule, "error_rate");
  EXPECT_NE(verdict->figures.find("> 10.0%"), std::string::npos) << verdict->figures;
}

TEST(RollbackWatchTest, FewRequestsDecideNothingAndOldOnesLeaveTheWindow) {
  const auto t0 = Clock::now();
  RollbackWatch w(Settings({{"vramd.rollback.error_rate", "10%"},
                            {"vramd.rollback.error_window_s", "5"},
                            {"vramd.rollback.min_requests", "10"}}),
                  t0);
  Feed feed(&w, t0);
  for (int i = 0; i < 5; ++i) feed.Request(t0 + seconds(1), false, milliseconds(1));
  EXPECT_FALSE(w.Check(t0 + seconds(6)));  // 5 failures: under min_requests
  // Twenty good requests later; the failures have left the window by then.
  for (int i = 0; i < 20; ++i) feed.Request(t0 + seconds(8), true, milliseconds(1));
  EXPECT_FALSE(w.Check(t0 + seconds(8)));
}

TEST(RollbackWatchTest, P99LatencyFires) {
  const auto t0 = Clock::now();
  RollbackWatch w(Settings({{"vramd.rollback.p99_ms", "50"},
                            {"vramd.rollback.error_window_s", "2"},
                            {"vramd.rollback.min_requests", "100"}}),
                  t0);
  Feed feed(&w, t0);
  // The window at 2 s is seconds 1 and 2.
  for (int i = 0; i < 100; ++i) {
    feed.Request(t0 + seconds(1) + milliseconds(9 * i), true, milliseconds(5));
  }
  EXPECT_FALSE(w.Check(t0 + seconds(2)));  // p99 5 ms
  for (int i = 0; i < 10; ++i) feed.Request(t0 + seconds(2), true, milliseconds(200));
  auto verdict = w.Check(t0 + seconds(2) + milliseconds(500));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->rule, "p99_latency");
}

TEST(RollbackWatchTest, GpuUtilizationMustStayOverForItsTime) {
  const auto t0 = Clock::now();
  RollbackWatch w(Settings({{"vramd.rollback.gpu_util", "95%"},
                            {"vramd.rollback.gpu_util_s", "10"}}),
                  t0);
  for (int s = 0; s < 9; ++s) w.OnGpuUtilization(t0 + seconds(s), 0.99);
  EXPECT_FALSE(w.Check(t0 + seconds(9)));
  w.OnGpuUtilization(t0 + seconds(9), 0.50);  // a dip restarts the count
  for (int s = 10; s < 19; ++s) w.OnGpuUtilization(t0 + seconds(s), 0.99);
  EXPECT_FALSE(w.Check(t0 + seconds(18)));
  w.OnGpuUtilization(t0 + seconds(20), 0.99);
  auto verdict = w.Check(t0 + seconds(20));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->rule, "gpu_utilization");
}

TEST(RollbackWatchTest, OomAndLeakFireAtOnceAndNothingAfterTheWatch) {
  const auto t0 = Clock::now();
  RollbackWatch w(Settings({{"vramd.rollback.watch_s", "60"}}), t0);
  EXPECT_FALSE(w.Check(t0 + seconds(1)));
  w.OnLeak("version 2 leaked 4096 bytes");
  auto verdict = w.Check(t0 + seconds(1));
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->rule, "leak");
  EXPECT_FALSE(w.Check(t0 + seconds(61)));  // the watch is over
  // An out-of-memory failure in the version's counts fires at once.
  RollbackWatch oom(Settings({{"vramd.rollback.watch_s", "60"}}), t0);
  RollbackWatch::RequestSample counts;
  oom.OnSample(t0, counts);
  counts.requests = counts.errors = counts.out_of_memory = 1;
  oom.OnSample(t0 + seconds(1), counts);
  auto oom_verdict = oom.Check(t0 + seconds(1));
  ASSERT_TRUE(oom_verdict);
  EXPECT_EQ(oom_verdict->rule, "oom");
  RollbackWatch off(Settings({{"vramd.rollback.on_oom", "false"}}), t0);
  off.OnOom("out of memory");
  EXPECT_FALSE(off.Check(t0 + seconds(1)));
}

}  // namespace
}  // namespace vramd::runtime

namespace vramd::runtime {
namespace {

TEST(LatencyHistogramTest, BucketsBoundTheirDurationsWithinAnEighth) {
  for (uint64_t us : {1ull, 3ull, 7ull, 100ull, 1234ull, 999999ull, 123456789ull}) {
    const int b = LatencyHistogram::BucketOf(us * 1000);
    EXPECT_LT(static_cast<double>(us), LatencyHistogram::UpperBoundUs(b)) << us;
    EXPECT_LE(LatencyHistogram::UpperBoundUs(b), us * 1.25 + 1) << us;
  }
  LatencyHistogram::Counts counts{};
  counts[LatencyHistogram::BucketOf(5'000'000)] = 99;
  counts[LatencyHistogram::BucketOf(200'000'000)] = 2;
  EXPECT_GT(LatencyHistogram::QuantileUs(counts, 0.99), 200'000);
  EXPECT_LT(LatencyHistogram::QuantileUs(counts, 0.5), 6'000);
}

}  // namespace
}  // namespace vramd::runtime
