// PrometheusText: writes metrics in Prometheus' text exposition format, version 0.0.4 (the
// format every Prometheus server scrapes; Content-Type "text/plain; version=0.0.4").
//
//   PrometheusText out;
//   out.Family("vramd_pool_reserved_bytes", "Bytes the pool holds from the driver.", kGauge);
//   out.Sample({{"device", "cuda:0"}}, 2097152);
//   std::string text = out.Take();
//
// gives
//   # HELP vramd_pool_reserved_bytes Bytes the pool holds from the driver.
//   # TYPE vramd_pool_reserved_bytes gauge
//   vramd_pool_reserved_bytes{device="cuda:0"} 2097152
//
// Escaping follows the format: in label values \ " and newline become \\ \" \n; in HELP text
// \ and newline become \\ \n. Values: integers as integers, doubles in their shortest exact
// form, NaN, +Inf and -Inf as spelled by the format. Samples belong to the family opened last
// and must follow it without a gap (the format requires one group per family).
//
// Metric and label names are the caller's constants: REQUIRES: they match
// [a-zA-Z_:][a-zA-Z0-9_:]* (metric) and [a-zA-Z_][a-zA-Z0-9_]* (label); checked by assert.
//
// Thread safety: a PrometheusText is used by one thread at a time.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vramd::metrics {

// The Content-Type of a page in this format.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kCounter, kGauge, kUntyped };
inline constexpr MetricType kCounter = MetricType::kCounter;
inline constexpr MetricType kGauge = MetricType::kGauge;
inline constexpr MetricType kUntyped = MetricType::kUntyped;

using Label = std::pair<std::string_view, std::string_view>;

// A sample value as the format spells it.
std::string FormatValue(double value);

class PrometheusText {
 public:
  // Starts a family: writes its # HELP and # TYPE lines.
  void Family(std::string_view name, std::string_view help, MetricType type);

  // One sample of the current family. REQUIRES: Family was called.
  void Sample(std::initializer_list<Label> labels, double value) {
    WriteSample(labels.begin(), labels.end(), FormatValue(value));
  }
  void Sample(const std::vector<Label>& labels, double value) {
    WriteSample(labels.data(), labels.data() + labels.size(), FormatValue(value));
  }
  // Integers are written exactly, whatever their size.
  template <std::integral T>
  void Sample(std::initializer_list<Label> labels, T value) {
    WriteSample(labels.begin(), labels.end(), std::to_string(value));
  }
  template <std::integral T>
  void Sample(const std::vector<Label>& labels, T value) {
    WriteSample(labels.data(), labels.data() + labels.size(), std::to_string(value));
  }

  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void WriteSample(const Label* begin, const Label* end, std::string_view value);

  std::string out_;
  std::string family_;
};

// Escapes a label value (\ " newline) and HELP text (\ newline).
std::string EscapeLabelValue(std::string_view value);
std::string EscapeHelp(std::string_view help);

}  // namespace vramd::metrics
