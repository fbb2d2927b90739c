// GET /metrics with models' custom metrics: the manager's registry (ModelManager::Options::
// custom_metrics) is written after every family of vramd's; without one, no model family.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "memory/memory_report.h"
#include "runtime/custom_metrics.h"
#include "server/http/metrics_routes.h"
#include "support/manager_fixture.h"

namespace vramd {
namespace {

using ::testing::HasSubstr;

class EmptySource : public memory::MemoryReportSource {
 public:
  memory::MemoryReport Build() const override { return {}; }
};

class MetricsCustomTest : public testing::ManagerTest {};

TEST_F(MetricsCustomTest, ModelsFamiliesComeLastOnThePage) {
  runtime::CustomMetricsRegistry registry;
  auto options = ManagerOptions();
  options.custom_metrics = &registry;
  auto manager = StartManager(options);
  ASSERT_NE(manager, nullptr);
  auto family = registry.Family("model_requests", "Requests a model counted.",
                                runtime::kCounter);
  ASSERT_TRUE(family.ok());
  auto metric = (*family)->Metric({{"model", "m"}}, {});
  ASSERT_TRUE(metric.ok());
  ASSERT_TRUE((*metric)->Increment(3).ok());

  EmptySource source;
  const std::string page = http::MetricsResponse(source, manager.get()).body;
  EXPECT_THAT(page, HasSubstr("# HELP model_requests Requests a model counted.\n"
                              "# TYPE model_requests counter\n"
                              "model_requests{model=\"m\"} 3\n"));
  EXPECT_LT(page.rfind("vramd_"), page.find("model_requests")) << page;

  metric = Status::Internal("dropped");
  family = Status::Internal("dropped");
  EXPECT_EQ(http::MetricsResponse(source, manager.get()).body.find("model_requests"),
            std::string::npos)
      << "a metric nothing references is no longer exported";
}

TEST_F(MetricsCustomTest, WithoutARegistryThePageHasNoModelFamilies) {
  auto manager = StartManager(ManagerOptions());
  ASSERT_NE(manager, nullptr);
  EXPECT_EQ(manager->custom_metrics(), nullptr);
  runtime::CustomMetricsRegistry unused;  // a registry the manager was not given
  auto family = unused.Family("elsewhere", "Not on this page.", runtime::kGauge);
  ASSERT_TRUE(family.ok());
  auto metric = (*family)->Metric({}, {});
  ASSERT_TRUE(metric.ok());
  EmptySource source;
  http::HttpResponse page = http::MetricsResponse(source, manager.get());
  EXPECT_EQ(page.status, 200u);
  EXPECT_EQ(page.body.find("elsewhere"), std::string::npos);
}

}  // namespace
}  // namespace vramd
