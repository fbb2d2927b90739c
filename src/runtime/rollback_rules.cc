#include "runtime/rollback_rules.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

namespace vramd::runtime {
namespace {

constexpr std::string_view kPrefix = "vramd.rollback.";

Result<double> ParseShare(std::string_view key, std::string_view text) {
  const bool percent = !text.empty() && text.back() == '%';
  if (percent) text.remove_suffix(1);
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return Status::InvalidArgument(fmt::format(
        "parameter '{}' takes a share such as \"5%\" or \"0.05\", not '{}'", key, text));
  }
  if (percent) value /= 100;
  if (value < 0 || value > 1) {
    return Status::InvalidArgument(
        fmt::format("parameter '{}' must be between 0% and 100%, not '{}'", key, text));
  }
  return value;
}

Result<uint64_t> ParseCount(std::string_view key, std::string_view text, uint64_t min) {
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min ||
      value > 10'000'000) {
    return Status::InvalidArgument(fmt::format(
        "parameter '{}' takes a whole number from {} to 10000000, not '{}'", key, min, text));
  }
  return value;
}

Result<bool> ParseBool(std::string_view key, std::string_view text) {
  if (text == "true") return true;
  if (text == "false") return false;
  return Status::InvalidArgument(
      fmt::format("parameter '{}' takes \"true\" or \"false\", not '{}'", key, text));
}

}  // namespace

const char* RollbackKeepName(RollbackKeep keep) {
  switch (keep) {
    case RollbackKeep::kWarm: return "warm";
    case RollbackKeep::kAsleep: return "asleep";
    case RollbackKeep::kReload: return "reload";
  }
  return "?";
}

Result<RollbackSettings> RollbackSettingsFromConfig(const config::ModelConfig& config) {
  RollbackSettings s;
  for (const auto& [key, value] : config.parameters()) {
    if (key.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    const std::string_view name = std::string_view(key).substr(kPrefix.size());
    const std::string& text = value.string_value();
    s.enabled = true;
    if (name == "watch_s") {
      VRAMD_ASSIGN_OR_RETURN(uint64_t n, ParseCount(key, text, 1));
      s.watch = std::chrono::seconds(n);
    } else if (name == "error_rate") {
      VRAMD_ASSIGN_OR_RETURN(s.max_error_rate, ParseShare(key, text));
    } else if (name == "error_window_s") {
      VRAMD_ASSIGN_OR_RETURN(uint64_t n, ParseCount(key, text, 1));
      s.window = std::chrono::seconds(n);
    } else if (name == "p99_ms") {
      VRAMD_ASSIGN_OR_RETURN(uint64_t n, ParseCount(key, text, 1));
      s.max_p99_ms = static_cast<double>(n);
    } else if (name == "min_requests") {
      VRAMD_ASSIGN_OR_RETURN(s.min_requests, ParseCount(key, text, 1));
    } else if (name == "gpu_util") {
      VRAMD_ASSIGN_OR_RETURN(s.max_gpu_util, ParseShare(key, text));
    } else if (name == "gpu_util_s") {
      VRAMD_ASSIGN_OR_RETURN(uint64_t n, ParseCount(key, text, 1));
      s.gpu_util_for = std::chrono::seconds(n);
    } else if (name == "on_oom") {
      VRAMD_ASSIGN_OR_RETURN(s.on_oom, ParseBool(key, text));
    } else if (name == "on_leak") {
      VRAMD_ASSIGN_OR_RETURN(s.on_leak, ParseBool(key, text));
    } else if (name == "cooldown_s") {
      VRAMD_ASSIGN_OR_RETURN(uint64_t n, ParseCount(key, text, 0));
      s.cooldown = std::chrono::seconds(n);
    } else if (name == "keep") {
      if (text == "warm") {
        s.keep = RollbackKeep::kWarm;
      } else if (text == "asleep") {
        s.keep = RollbackKeep::kAsleep;
      } else if (text == "reload") {
        s.keep = RollbackKeep::kReload;
      } else {
        return Status::InvalidArgument(fmt::format(
            "parameter '{}' takes \"warm\", \"asleep\" or \"reload\", not '{}'", key, text));
      }
    } else if (name == "fallback_model") {
      // A model is a directory of a repository: a name of at most NAME_MAX bytes, no '/'.
      if (text.empty() || text.size() > 255 || text.find('/') != std::string::npos ||
          text == "." || text == ".." || text == config.name()) {
        return Status::InvalidArgument(fmt::format(
            "parameter '{}' takes the name of another model, not '{}'", key, text));
      }
      s.fallback_model = text;
    } else {
      return Status::InvalidArgument(fmt::format(
          "unknown parameter '{}' (vramd.rollback.: watch_s, error_rate, error_window_s, p99_ms, "
          "min_requests, gpu_util, gpu_util_s, on_oom, on_leak, cooldown_s, keep, "
          "fallback_model)",
          key));
    }
  }
  if (s.window > s.watch) {
    return Status::InvalidArgument(fmt::format(
        "parameter 'vramd.rollback.error_window_s' ({} s) is longer than the watch "
        "(vramd.rollback.watch_s, {} s): its window could never be whole",
        s.window.count(), s.watch.count()));
  }
  return s;
}

RollbackWatch::RollbackWatch(RollbackSettings settings, Clock::time_point live_since)
    : settings_(std::move(settings)), live_since_(live_since) {}

RollbackWatch::Second& RollbackWatch::SecondAt(Clock::time_point now) {
  const int64_t index =
      std::chrono::duration_cast<std::chrono::seconds>(now - live_since_).count();
  if (seconds_.empty() || seconds_.back().index < index) {
    seconds_.emplace_back();
    seconds_.back().index = index;
  }
  DropBefore(index - settings_.window.count() + 1);
  return seconds_.back();
}

void RollbackWatch::DropBefore(int64_t first_index) {
  while (!seconds_.empty() && seconds_.front().index < first_index) seconds_.pop_front();
}

void RollbackWatch::OnSample(Clock::time_point now, const RequestSample& cumulative) {
  if (now < live_since_) return;
  Second& s = SecondAt(now);
  // Counters only grow; a smaller figure would be another version's, and counts nothing.
  auto delta = [](uint64_t now_value, uint64_t before) {
    return now_value > before ? now_value - before : 0;
  };
  if (const uint64_t oom = delta(cumulative.out_of_memory, last_.out_of_memory); oom > 0) {
    OnOom(fmt::format("{} request(s) failed out of memory", oom));
  }
  s.counts.requests += delta(cumulative.requests, last_.requests);
  s.counts.errors += delta(cumulative.errors, last_.errors);
  for (int b = 0; b < LatencyHistogram::kBuckets; ++b) {
    s.counts.latency[b] += delta(cumulative.latency[b], last_.latency[b]);
  }
  last_ = cumulative;
}

void RollbackWatch::OnGpuUtilization(Clock::time_point now, double share) {
  gpu_last_share_ = share;
  if (!settings_.max_gpu_util || share <= *settings_.max_gpu_util) {
    gpu_over_since_.reset();
  } else if (!gpu_over_since_) {
    gpu_over_since_ = now;
  }
}

void RollbackWatch::OnOom(std::string what) {
  if (settings_.on_oom && !event_) event_ = RollbackVerdict{"oom", std::move(what)};
}

void RollbackWatch::OnLeak(std::string what) {
  if (settings_.on_leak && !event_) event_ = RollbackVerdict{"leak", std::move(what)};
}

std::optional<RollbackVerdict> RollbackWatch::Check(Clock::time_point now) {
  if (!settings_.enabled || !Watching(now)) return std::nullopt;
  if (event_) return event_;
  if (settings_.max_gpu_util && gpu_over_since_ && now - *gpu_over_since_ >= settings_.gpu_util_for) {
    return RollbackVerdict{
        "gpu_utilization",
        fmt::format("GPU utilization {:.0f}% over {:.0f}% for {} s", gpu_last_share_ * 100,
                    *settings_.max_gpu_util * 100,
                    std::chrono::duration_cast<std::chrono::seconds>(now - *gpu_over_since_)
                        .count())};
  }
  // The window's rules judge a whole window only.
  if (now - live_since_ < settings_.window) return std::nullopt;
  const int64_t index =
      std::chrono::duration_cast<std::chrono::seconds>(now - live_since_).count();
  DropBefore(index - settings_.window.count() + 1);
  uint64_t requests = 0, errors = 0;
  LatencyHistogram::Counts latency{};
  for (const Second& s : seconds_) {
    requests += s.counts.requests;
    errors += s.counts.errors;
    for (int b = 0; b < LatencyHistogram::kBuckets; ++b) latency[b] += s.counts.latency[b];
  }
  if (requests < settings_.min_requests) return std::nullopt;
  const double rate = static_cast<double>(errors) / static_cast<double>(requests);
  if (settings_.max_error_rate && rate > *settings_.max_error_rate) {
    return RollbackVerdict{
        "error_rate", fmt::format("{} of {} requests failed ({:.1f}% > {:.1f}%) over {} s",
                                  errors, requests, rate * 100, *settings_.max_error_rate * 100,
                                  settings_.window.count())};
  }
  if (settings_.max_p99_ms) {
    const double p99_us = LatencyHistogram::QuantileUs(latency, 0.99);
    if (p99_us / 1000 > *settings_.max_p99_ms) {
      return RollbackVerdict{
          "p99_latency", fmt::format("p99 latency {:.1f} ms > {:.0f} ms over {} requests in {} s",
                                     p99_us / 1000, *settings_.max_p99_ms, requests,
                                     settings_.window.count())};
    }
  }
  return std::nullopt;
}

}  // namespace vramd::runtime
