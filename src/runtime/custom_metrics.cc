#include "runtime/custom_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

namespace vramd::runtime {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string_view KindName(MetricKind kind) {
  switch (kind) {
    case MetricKind::kCounter: return "counter";
    case MetricKind::kGauge: return "gauge";
    case MetricKind::kHistogram: return "histogram";
  }
  return "untyped";
}

// Triton's name of a kind, as its refusals spell it (core/src/metric_family.cc).
std::string_view TritonKindName(MetricKind kind) {
  switch (kind) {
    case MetricKind::kCounter: return "TRITONSERVER_METRIC_KIND_COUNTER";
    case MetricKind::kGauge: return "TRITONSERVER_METRIC_KIND_GAUGE";
    case MetricKind::kHistogram: return "TRITONSERVER_METRIC_KIND_HISTOGRAM";
  }
  return "TRITONSERVER_METRIC_KIND_UNKNOWN";
}

Status NotSupported(MetricKind kind, std::string_view operation) {
  return Status::Unsupported(fmt::format("{} does not support {}", TritonKindName(kind), operation));
}

// The text format's spellings. These repeat server/metrics/prometheus_text.cc's few lines: the
// runtime library sits below the server's and cannot link it, and the page it writes needs a
// histogram type that writer does not have.
std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);  // shortest form that reads back exactly
}

void AppendEscaped(std::string* out, std::string_view text, bool quote) {
  for (char c : text) {
    switch (c) {
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '"':
        if (quote) {
          *out += "\\\"";
          break;
        }
        [[fallthrough]];
      default: out->push_back(c);
    }
  }
}

// name{a="x",b="y"[,le="<le>"]} value
void AppendSample(std::string* out, std::string_view name, std::string_view suffix,
                  const Labels& labels, const std::string* le, std::string_view value) {
  *out += name;
  *out += suffix;
  if (!labels.empty() || le != nullptr) {
    *out += '{';
    bool first = true;
    for (const auto& [label, text] : labels) {
      if (!first) *out += ',';
      first = false;
      *out += label;
      *out += "=\"";
      AppendEscaped(out, text, /*quote=*/true);
      *out += '"';
    }
    if (le != nullptr) {
      if (!first) *out += ',';
      *out += "le=\"";
      *out += *le;
      *out += '"';
    }
    *out += '}';
  }
  *out += ' ';
  *out += value;
  *out += '\n';
}

bool ValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                        (allow_colon && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

// One metric: a counter's or gauge's value, or a histogram's per-bucket counts, sum and count.
class MetricImpl final : public backends::CustomMetric {
 public:
  struct Snapshot {
    double value = 0;
    std::vector<uint64_t> bucket_counts;  // per bucket, not cumulative; the last is +Inf's
    double sum = 0;
    uint64_t count = 0;
  };

  MetricImpl(std::shared_ptr<const void> family, MetricKind kind, Labels labels,
             std::vector<double> buckets)
      : family_(std::move(family)),
        kind_(kind),
        labels_(std::move(labels)),
        buckets_(std::move(buckets)) {
    if (kind_ == MetricKind::kHistogram) bucket_counts_.assign(buckets_.size() + 1, 0);
  }

  Status Increment(double value) override EXCLUDES(mu_) {
    switch (kind_) {
      case MetricKind::kCounter:
        if (!(value >= 0.0)) {  // NaN too: a counter never goes back, nor becomes NaN
          return Status::InvalidArgument(
              "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
              "non-negative values.");
        }
        break;
      case MetricKind::kGauge: break;
      case MetricKind::kHistogram: return NotSupported(kind_, "Increment");
    }
    MutexLock lock(mu_);
    value_ += value;
    return Status::Ok();
  }

  Status Set(double value) override EXCLUDES(mu_) {
    if (kind_ != MetricKind::kGauge) return NotSupported(kind_, "Set");
    MutexLock lock(mu_);
    value_ = value;
    return Status::Ok();
  }

  Status Observe(double value) override EXCLUDES(mu_) {
    if (kind_ != MetricKind::kHistogram) return NotSupported(kind_, "Observe");
    // The first bucket whose bound is >= value; past the last (+Inf) for NaN, as prometheus-cpp.
    const size_t bucket = static_cast<size_t>(
        std::find_if(buckets_.begin(), buckets_.end(), [value](double b) { return value <= b; }) -
        buckets_.begin());
    MutexLock lock(mu_);
    ++bucket_counts_[bucket];
    sum_ += value;
    ++count_;
    return Status::Ok();
  }

  Result<double> Value() const override EXCLUDES(mu_) {
    if (kind_ == MetricKind::kHistogram) return NotSupported(kind_, "Value");
    MutexLock lock(mu_);
    return value_;
  }

  Snapshot Read() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return Snapshot{value_, bucket_counts_, sum_, count_};
  }

  const Labels& labels() const { return labels_; }
  const std::vector<double>& buckets() const { return buckets_; }

 private:
  // Constant after construction. `family_` keeps the family alive while the metric is.
  const std::shared_ptr<const void> family_;
  const MetricKind kind_;
  const Labels labels_;  // sorted by name
  const std::vector<double> buckets_;

  mutable Mutex mu_;  // a leaf
  double value_ GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> bucket_counts_ GUARDED_BY(mu_);
  double sum_ GUARDED_BY(mu_) = 0;
  uint64_t count_ GUARDED_BY(mu_) = 0;
};

Status CheckLabels(const Labels& sorted, MetricKind kind) {
  for (size_t i = 0; i < sorted.size(); ++i) {
    const std::string& name = sorted[i].first;
    if (!IsValidLabelName(name) || name.starts_with("__")) {
      return Status::InvalidArgument(fmt::format(
          "label name '{}' is not a valid Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not "
          "starting with '__')",
          name));
    }
    if (kind == MetricKind::kHistogram && name == "le") {
      return Status::InvalidArgument("label name 'le' is reserved for a histogram's buckets");
    }
    if (i > 0 && sorted[i - 1].first == name) {
      return Status::InvalidArgument(fmt::format("label '{}' is given twice", name));
    }
  }
  return Status::Ok();
}

Status CheckBuckets(const std::vector<double>& buckets, MetricKind kind) {
  if (kind != MetricKind::kHistogram) {
    if (buckets.empty()) return Status::Ok();
    return Status::InvalidArgument(
        fmt::format("Unexpected args found in {} Metric constructor.", KindName(kind)));
  }
  if (buckets.empty()) {
    return Status::InvalidArgument("Bucket boundaries not found in Metric args.");
  }
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!std::isfinite(buckets[i])) {
      return Status::InvalidArgument(fmt::format(
          "histogram bucket boundary {} is not finite (the +Inf bucket is always added)",
          FormatValue(buckets[i])));
    }
    if (i > 0 && !(buckets[i - 1] < buckets[i])) {
      return Status::InvalidArgument(fmt::format(
          "histogram bucket boundaries must be strictly ascending ({} then {})",
          FormatValue(buckets[i - 1]), FormatValue(buckets[i])));
    }
  }
  return Status::Ok();
}

}  // namespace

bool IsValidMetricName(std::string_view name) { return ValidName(name, /*allow_colon=*/true); }
bool IsValidLabelName(std::string_view name) { return ValidName(name, /*allow_colon=*/false); }

class CustomMetricsRegistry::FamilyImpl final
    : public backends::CustomMetricFamily,
      public std::enable_shared_from_this<CustomMetricsRegistry::FamilyImpl> {
 public:
  FamilyImpl(std::string name, std::string description, MetricKind kind)
      : name_(std::move(name)), description_(std::move(description)), kind_(kind) {}

  Result<std::shared_ptr<backends::CustomMetric>> Metric(
      std::vector<std::pair<std::string, std::string>> labels,
      std::vector<double> buckets) override EXCLUDES(mu_) {
    std::sort(labels.begin(), labels.end());
    VRAMD_RETURN_IF_ERROR(CheckLabels(labels, kind_));
    VRAMD_RETURN_IF_ERROR(CheckBuckets(buckets, kind_));
    MutexLock lock(mu_);
    std::erase_if(metrics_, [](const auto& entry) { return entry.second.expired(); });
    // lock() may still come back empty: the last reference can go after the pruning above.
    auto found = metrics_.find(labels);
    std::shared_ptr<MetricImpl> live = found != metrics_.end() ? found->second.lock() : nullptr;
    if (live != nullptr) {
      if (live->buckets() != buckets) {
        return Status::InvalidArgument(fmt::format(
            "metric family '{}' already has a histogram of these labels with other buckets",
            name_));
      }
      return std::shared_ptr<backends::CustomMetric>(std::move(live));
    }
    auto made = std::make_shared<MetricImpl>(shared_from_this(), kind_, labels, std::move(buckets));
    metrics_.insert_or_assign(std::move(labels), made);
    return std::shared_ptr<backends::CustomMetric>(std::move(made));
  }

  const std::string& name() const { return name_; }
  const std::string& description() const { return description_; }
  MetricKind kind() const { return kind_; }

  // The family's text, when it has a live metric.
  void Append(std::string* out) const EXCLUDES(mu_) {
    std::vector<std::shared_ptr<MetricImpl>> live;
    {
      MutexLock lock(mu_);
      std::erase_if(metrics_, [](const auto& entry) { return entry.second.expired(); });
      for (const auto& [labels, metric] : metrics_) {
        if (auto held = metric.lock()) live.push_back(std::move(held));
      }
    }
    if (live.empty()) return;
    *out += fmt::format("# HELP {} ", name_);
    AppendEscaped(out, description_, /*quote=*/false);
    *out += fmt::format("\n# TYPE {} {}\n", name_, KindName(kind_));
    for (const auto& metric : live) {
      const MetricImpl::Snapshot s = metric->Read();
      if (kind_ != MetricKind::kHistogram) {
        AppendSample(out, name_, "", metric->labels(), nullptr, FormatValue(s.value));
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < s.bucket_counts.size(); ++i) {
        cumulative += s.bucket_counts[i];
        const std::string le =
            i < metric->buckets().size() ? FormatValue(metric->buckets()[i]) : "+Inf";
        AppendSample(out, name_, "_bucket", metric->labels(), &le, std::to_string(cumulative));
      }
      AppendSample(out, name_, "_sum", metric->labels(), nullptr, FormatValue(s.sum));
      AppendSample(out, name_, "_count", metric->labels(), nullptr, std::to_string(s.count));
    }
  }

 private:
  const std::string name_;
  const std::string description_;
  const MetricKind kind_;

  mutable Mutex mu_;  // after the registry's, before a metric's
  // Pruned of dead metrics whenever one is made or the family is written.
  mutable std::map<Labels, std::weak_ptr<MetricImpl>> metrics_ GUARDED_BY(mu_);
};

CustomMetricsRegistry::CustomMetricsRegistry() = default;
CustomMetricsRegistry::~CustomMetricsRegistry() = default;

Result<std::shared_ptr<backends::CustomMetricFamily>> CustomMetricsRegistry::Family(
    std::string_view name, std::string_view description, MetricKind kind) {
  if (kind != MetricKind::kCounter && kind != MetricKind::kGauge &&
      kind != MetricKind::kHistogram) {
    return Status::InvalidArgument(
        fmt::format("unknown metric kind {} (0 counter, 1 gauge, 2 histogram)",
                    static_cast<int>(kind)));
  }
  if (!IsValidMetricName(name)) {
    return Status::InvalidArgument(fmt::format(
        "metric family name '{}' is not a valid Prometheus metric name "
        "([a-zA-Z_:][a-zA-Z0-9_:]*)",
        name));
  }
  if (name.starts_with("nv_") || name.starts_with("vramd_")) {
    return Status::InvalidArgument(fmt::format(
        "metric family name '{}': names starting 'nv_' or 'vramd_' are the server's own", name));
  }
  MutexLock lock(mu_);
  std::erase_if(families_, [](const auto& entry) { return entry.second.expired(); });
  auto found = families_.find(name);
  std::shared_ptr<FamilyImpl> live = found != families_.end() ? found->second.lock() : nullptr;
  if (live != nullptr) {  // empty also when the last reference went after the pruning
    if (live->kind() != kind || live->description() != description) {
      return Status::InvalidArgument(fmt::format(
          "metric family '{}' already exists as a {} described as '{}'; a name has one kind and "
          "one description",
          name, KindName(live->kind()), live->description()));
    }
    return std::shared_ptr<backends::CustomMetricFamily>(std::move(live));
  }
  auto made = std::make_shared<FamilyImpl>(std::string(name), std::string(description), kind);
  families_.insert_or_assign(std::string(name), made);
  return std::shared_ptr<backends::CustomMetricFamily>(std::move(made));
}

std::string CustomMetricsRegistry::PrometheusText() const {
  std::vector<std::shared_ptr<FamilyImpl>> live;
  {
    MutexLock lock(mu_);
    std::erase_if(families_, [](const auto& entry) { return entry.second.expired(); });
    for (const auto& [name, family] : families_) {
      if (auto held = family.lock()) live.push_back(std::move(held));
    }
  }
  std::string out;
  for (const auto& family : live) family->Append(&out);
  return out;
}

size_t CustomMetricsRegistry::TEST_Entries() const {
  MutexLock lock(mu_);
  return families_.size();
}

}  // namespace vramd::runtime
