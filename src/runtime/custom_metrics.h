// CustomMetricsRegistry: the metric families models make themselves (Triton's custom metrics,
// pb_utils.MetricFamily / Metric), exported on the metrics endpoint after vramd's own families.
//
//   auto family = registry.Family("requests_seen", "Requests this model saw.", kCounter);
//   auto metric = (*family)->Metric({{"model", "m"}}, {});
//   (*metric)->Increment(1);
//   std::string page = registry.PrometheusText();
//
// Triton's rules (core/src/metric_family.cc), with its messages and codes:
//   - a counter only increments, by >= 0 (InvalidArgument); Set and Observe are Unsupported;
//   - a gauge increments (either sign) and sets; Observe is Unsupported;
//   - a histogram only observes; Value, Increment and Set are Unsupported. Its buckets
//     (ascending, finite upper bounds) are required; +Inf is added to them;
//   - a family's name is a valid Prometheus metric name; label names valid label names;
//   - a name taken by a live family of another kind or description is refused; the same name,
//     kind and description give the same family; the same labels in a family the same metric.
//
// Lifetime (a decision): the registry keeps families and metrics only weakly. A metric keeps its
// family alive; the family and the registry hold weak references. A metric whose last
// reference is gone (the Python object died, or the model unloaded) stops being exported, as
// Triton removes it with the object, and the same labels later start a new metric from zero. A
// family with no live metric writes nothing, and once nothing references it its name is free
// for another kind. (Triton keeps a dead family's name registered forever, DLIS-4072; vramd frees
// it, so that reloading a model that changed a family's description is not refused.)
//
// Names vramd writes itself are refused: a family name starting "nv_" or "vramd_" would put two
// families of one name on the page.
//
// Thread safety: every method is safe from any thread. Lock order: the registry's mutex, then
// a family's, then a metric's; PrometheusText holds at most one of them at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/server_services.h"
#include "core/mutex.h"
#include "core/status.h"
#include "core/thread_annotations.h"

namespace vramd::runtime {

using backends::MetricKind;
inline constexpr MetricKind kCounter = MetricKind::kCounter;
inline constexpr MetricKind kGauge = MetricKind::kGauge;
inline constexpr MetricKind kHistogram = MetricKind::kHistogram;

class CustomMetricsRegistry {
 public:
  CustomMetricsRegistry();
  ~CustomMetricsRegistry();
  CustomMetricsRegistry(const CustomMetricsRegistry&) = delete;
  CustomMetricsRegistry& operator=(const CustomMetricsRegistry&) = delete;

  // The family `name` (see the rules above): the live one of that name when kind and
  // description match, else a new one. InvalidArgument for an invalid or reserved name, or a
  // name a live family of another kind or description holds.
  Result<std::shared_ptr<backends::CustomMetricFamily>> Family(std::string_view name,
                                                               std::string_view description,
                                                               MetricKind kind) EXCLUDES(mu_);

  // Every family with a live metric, in Prometheus' text format 0.0.4: # HELP, # TYPE, then one
  // sample per metric (labels sorted by name); a histogram's as <name>_bucket{...,le="<bound>"}
  // (cumulative, +Inf last), <name>_sum and <name>_count. Families in name order; "" when none.
  std::string PrometheusText() const EXCLUDES(mu_);

  // For tests: names of the families the registry still holds an entry for (live or not yet
  // pruned).
  size_t TEST_Entries() const EXCLUDES(mu_);

  class FamilyImpl;  // custom_metrics.cc

 private:
  mutable Mutex mu_;
  // Pruned of dead families whenever a family is made or the page is written.
  mutable std::map<std::string, std::weak_ptr<FamilyImpl>, std::less<>> families_ GUARDED_BY(mu_);
};

// Whether `name` is a valid Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) and label name
// ([a-zA-Z_][a-zA-Z0-9_]*).
bool IsValidMetricName(std::string_view name);
bool IsValidLabelName(std::string_view name);

}  // namespace vramd::runtime
