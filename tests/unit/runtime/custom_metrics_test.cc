// CustomMetricsRegistry: Triton's rules for custom metrics (which operation each kind takes, with
// Triton's messages), family and metric identity, Prometheus names, the text page (histograms
// included), and that what nothing references any more stops being exported.
#include "runtime/custom_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

namespace vramd::runtime {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<backends::CustomMetricFamily> MakeFamily(CustomMetricsRegistry& registry,
                                                         const std::string& name,
                                                         MetricKind kind,
                                                         const std::string& help = "help") {
  auto family = registry.Family(name, help, kind);
  EXPECT_TRUE(family.ok()) << family.status().ToString();
  return family.ok() ? *family : nullptr;
}

std::shared_ptr<backends::CustomMetric> MakeMetric(
    backends::CustomMetricFamily& family,
    std::vector<std::pair<std::string, std::string>> labels = {},
    std::vector<double> buckets = {}) {
  auto metric = family.Metric(std::move(labels), std::move(buckets));
  EXPECT_TRUE(metric.ok()) << metric.status().ToString();
  return metric.ok() ? *metric : nullptr;
}

TEST(CustomMetricsTest, CounterOnlyIncrementsByNonNegativeValues) {
  CustomMetricsRegistry registry;
  auto family = MakeFamily(registry, "requests_total", kCounter);
  auto counter = MakeMetric(*family);
  EXPECT_TRUE(counter->Increment(2).ok());
  EXPECT_TRUE(counter->Increment(0.5).ok());
  EXPECT_EQ(*counter->Value(), 2.5);

  Status negative = counter->Increment(-1);
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.message(),
            "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
            "non-negative values.");
  EXPECT_EQ(counter->Increment(std::nan("")).code(), StatusCode::kInvalidArgument);

  Status set = counter->Set(7);
  EXPECT_EQ(set.code(), StatusCode::kUnsupported);
  EXPECT_EQ(set.message(), "TRITONSERVER_METRIC_KIND_COUNTER does not support Set");
  Status observe = counter->Observe(1);
  EXPECT_EQ(observe.code(), StatusCode::kUnsupported);
  EXPECT_EQ(observe.message(), "TRITONSERVER_METRIC_KIND_COUNTER does not support Observe");
  EXPECT_EQ(*counter->Value(), 2.5) << "refused operations change nothing";
}

TEST(CustomMetricsTest, GaugeIncrementsEitherWayAndSetsButDoesNotObserve) {
  CustomMetricsRegistry registry;
  auto gauge = MakeMetric(*MakeFamily(registry, "queue_depth", kGauge));
  EXPECT_TRUE(gauge->Increment(5).ok());
  EXPECT_TRUE(gauge->Increment(-2).ok());
  EXPECT_EQ(*gauge->Value(), 3);
  EXPECT_TRUE(gauge->Set(-10).ok());
  EXPECT_EQ(*gauge->Value(), -10);
  Status observe = gauge->Observe(1);
  EXPECT_EQ(observe.code(), StatusCode::kUnsupported);
  EXPECT_EQ(observe.message(), "TRITONSERVER_METRIC_KIND_GAUGE does not support Observe");
}

TEST(CustomMetricsTest, HistogramOnlyObserves) {
  CustomMetricsRegistry registry;
  auto family = MakeFamily(registry, "latency_seconds", kHistogram);
  auto histogram = MakeMetric(*family, {}, {0.1, 1});
  EXPECT_TRUE(histogram->Observe(0.5).ok());
  for (const auto& [status, operation] :
       {std::pair{histogram->Increment(1), "Increment"}, std::pair{histogram->Set(1), "Set"},
        std::pair{histogram->Value().status(), "Value"}}) {
    EXPECT_EQ(status.code(), StatusCode::kUnsupported) << operation;
    EXPECT_EQ(status.message(),
              std::string("TRITONSERVER_METRIC_KIND_HISTOGRAM does not support ") + operation);
  }
}

TEST(CustomMetricsTest, BucketsAreRequiredForHistogramsAndRefusedForTheOthers) {
  CustomMetricsRegistry registry;
  auto histograms = MakeFamily(registry, "h", kHistogram);
  auto none = histograms->Metric({}, {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "Bucket boundaries not found in Metric args.");
  EXPECT_FALSE(histograms->Metric({}, {1, 1}).ok()) << "not strictly ascending";
  EXPECT_FALSE(histograms->Metric({}, {2, 1}).ok());
  EXPECT_FALSE(histograms->Metric({}, {1, std::numeric_limits<double>::infinity()}).ok());
  EXPECT_FALSE(histograms->Metric({}, {std::nan("")}).ok());
  EXPECT_FALSE(histograms->Metric({{"le", "x"}}, {1}).ok()) << "le is the buckets' label";

  auto counters = MakeFamily(registry, "c", kCounter);
  auto with_buckets = counters->Metric({}, {1});
  ASSERT_FALSE(with_buckets.ok());
  EXPECT_EQ(with_buckets.status().message(), "Unexpected args found in counter Metric constructor.");
}

TEST(CustomMetricsTest, NamesMustBePrometheusNamesAndNotTheServers) {
  CustomMetricsRegistry registry;
  for (const char* bad : {"", "1abc", "with-dash", "sp ace", "nv_inference_count", "vramd_x"}) {
    auto family = registry.Family(bad, "h", kGauge);
    EXPECT_EQ(family.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(registry.Family("ok:name_1", "h", kGauge).ok());
  EXPECT_FALSE(registry.Family("k", "h", static_cast<MetricKind>(7)).ok());

  auto family = MakeFamily(registry, "labelled", kGauge);
  EXPECT_FALSE(family->Metric({{"bad-label", "v"}}, {}).ok());
  EXPECT_FALSE(family->Metric({{"__reserved", "v"}}, {}).ok());
  EXPECT_FALSE(family->Metric({{"a", "1"}, {"a", "2"}}, {}).ok()) << "a label twice";
}

TEST(CustomMetricsTest, ANameKeepsOneKindAndDescriptionWhileItsFamilyLives) {
  CustomMetricsRegistry registry;
  auto family = MakeFamily(registry, "shared", kCounter, "first");
  auto again = registry.Family("shared", "first", kCounter);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), family.get()) << "same name, kind and description: the same family";

  auto other_kind = registry.Family("shared", "first", kGauge);
  EXPECT_EQ(other_kind.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(other_kind.status().message(), HasSubstr("already exists as a counter"));
  EXPECT_EQ(registry.Family("shared", "second", kCounter).status().code(),
            StatusCode::kInvalidArgument);

  family.reset();
  again = {Status::Internal("dropped")};
  EXPECT_TRUE(registry.Family("shared", "now a gauge", kGauge).ok())
      << "once nothing references the family, its name is free";
}

TEST(CustomMetricsTest, TheSameLabelsGiveTheSameMetricInAnyOrder) {
  CustomMetricsRegistry registry;
  auto family = MakeFamily(registry, "by_labels", kCounter);
  auto a = MakeMetric(*family, {{"x", "1"}, {"y", "2"}});
  auto b = MakeMetric(*family, {{"y", "2"}, {"x", "1"}});
  auto other = MakeMetric(*family, {{"x", "1"}, {"y", "3"}});
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), other.get());
  ASSERT_TRUE(a->Increment(1).ok());
  EXPECT_EQ(*b->Value(), 1);

  auto histograms = MakeFamily(registry, "hist", kHistogram);
  auto h = MakeMetric(*histograms, {{"x", "1"}}, {1, 2});
  EXPECT_FALSE(histograms->Metric({{"x", "1"}}, {1, 3}).ok()) << "same labels, other buckets";
}

TEST(CustomMetricsTest, PrometheusTextOfCountersGaugesAndHistograms) {
  CustomMetricsRegistry registry;
  EXPECT_EQ(registry.PrometheusText(), "");
  auto counter = MakeMetric(*MakeFamily(registry, "b_requests", kCounter, "Requests seen."),
                            {{"model", "m"}, {"kind", "a\"b\\c\nd"}});
  auto gauge = MakeMetric(*MakeFamily(registry, "a_depth", kGauge, "Line one\nline two"));
  auto histogram = MakeMetric(*MakeFamily(registry, "c_latency", kHistogram, "Latency."),
                              {{"model", "m"}}, {0.5, 1, 2.5});
  ASSERT_TRUE(counter->Increment(3).ok());
  ASSERT_TRUE(gauge->Set(-1.25).ok());
  for (double v : {0.25, 0.5, 0.75, 2.0, 10.0}) ASSERT_TRUE(histogram->Observe(v).ok());

  EXPECT_EQ(registry.PrometheusText(),
            "# HELP a_depth Line one\\nline two\n"
            "# TYPE a_depth gauge\n"
            "a_depth -1.25\n"
            "# HELP b_requests Requests seen.\n"
            "# TYPE b_requests counter\n"
            "b_requests{kind=\"a\\\"b\\\\c\\nd\",model=\"m\"} 3\n"
            "# HELP c_latency Latency.\n"
            "# TYPE c_latency histogram\n"
            "c_latency_bucket{model=\"m\",le=\"0.5\"} 2\n"
            "c_latency_bucket{model=\"m\",le=\"1\"} 3\n"
            "c_latency_bucket{model=\"m\",le=\"2.5\"} 4\n"
            "c_latency_bucket{model=\"m\",le=\"+Inf\"} 5\n"
            "c_latency_sum{model=\"m\"} 13.5\n"
            "c_latency_count{model=\"m\"} 5\n");
}

TEST(CustomMetricsTest, WhatNothingReferencesIsNoLongerExported) {
  CustomMetricsRegistry registry;
  auto family = MakeFamily(registry, "short_lived", kGauge);
  auto kept = MakeMetric(*family, {{"id", "kept"}});
  auto dropped = MakeMetric(*family, {{"id", "dropped"}});
  ASSERT_TRUE(dropped->Set(5).ok());
  EXPECT_THAT(registry.PrometheusText(), HasSubstr("id=\"dropped\""));

  dropped.reset();
  EXPECT_THAT(registry.PrometheusText(), ::testing::Not(HasSubstr("id=\"dropped\"")));
  EXPECT_THAT(registry.PrometheusText(), HasSubstr("short_lived{id=\"kept\"} 0"));
  auto again = MakeMetric(*family, {{"id", "dropped"}});
  EXPECT_EQ(*again->Value(), 0) << "the same labels later start a new metric";

  // A metric keeps its family alive: dropping the family's handle first changes nothing.
  family.reset();
  EXPECT_THAT(registry.PrometheusText(), HasSubstr("short_lived{id=\"kept\"}"));
  kept.reset();
  again.reset();
  EXPECT_EQ(registry.PrometheusText(), "");
  EXPECT_EQ(registry.TEST_Entries(), 0u) << "writing the page prunes dead families";
}

}  // namespace
}  // namespace vramd::runtime
