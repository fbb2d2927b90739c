#include "server/metrics/prometheus_text.h"

#include <fmt/format.h>

#include <cassert>
#include <cmath>

#include "runtime/custom_metrics.h"

namespace vramd::metrics {
namespace {

std::string_view TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kUntyped: return "untyped";
  }
  return "untyped";
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);  // shortest form that reads back exactly
}

void PrometheusText::Family(std::string_view name, std::string_view help, MetricType type) {
  assert(runtime::IsValidMetricName(name) && "invalid metric name");
  family_ = std::string(name);
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, EscapeHelp(help), name,
                      TypeName(type));
}

void PrometheusText::WriteSample(const Label* begin, const Label* end, std::string_view value) {
  assert(!family_.empty() && "Sample before Family");
  out_ += family_;
  if (begin != end) {
    out_ += '{';
    for (const Label* l = begin; l != end; ++l) {
      assert(runtime::IsValidLabelName(l->first) && "invalid label name");
      if (l != begin) out_ += ',';
      out_ += l->first;
      out_ += "=\"";
      out_ += EscapeLabelValue(l->second);
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

}  // namespace vramd::metrics
