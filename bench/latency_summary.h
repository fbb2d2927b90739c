// Latency summaries for the load generators (infer_load.cc and torch/direct_bench.cc), so that
// the server's figures and the floor's are computed, and printed, the same way.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace vramd::bench {

struct LatencySummary {
  size_t requests = 0;
  double rps = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0, mean_ms = 0;
};

// Linear interpolation between the closest ranks of `sorted`.
inline double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const double idx = p * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(idx);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = idx - static_cast<double>(lo);
  return sorted[lo] * (1.0 - frac) + sorted[hi] * frac;
}

// Every thread's latencies (ms) of a run that lasted `duration_s`.
inline LatencySummary Summarize(const std::vector<std::vector<double>>& per_thread,
                                double duration_s) {
  std::vector<double> all;
  for (const auto& v : per_thread) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  LatencySummary s;
  s.requests = all.size();
  s.rps = duration_s > 0 ? static_cast<double>(all.size()) / duration_s : 0;
  s.p50_ms = Percentile(all, 0.50);
  s.p90_ms = Percentile(all, 0.90);
  s.p99_ms = Percentile(all, 0.99);
  for (double v : all) s.mean_ms += v;
  if (!all.empty()) s.mean_ms /= static_cast<double>(all.size());
  return s;
}

// The summary's JSON fields, without braces: "requests":..,"rps":..,"p50_ms":.. and so on.
inline std::string JsonFields(const LatencySummary& s) {
  char text[256];
  std::snprintf(text, sizeof text,
                "\"requests\":%zu,\"rps\":%.1f,\"p50_ms\":%.4f,\"p90_ms\":%.4f,\"p99_ms\":%.4f,"
                "\"mean_ms\":%.4f",
                s.requests, s.rps, s.p50_ms, s.p90_ms, s.p99_ms, s.mean_ms);
  return text;
}

}  // namespace vramd::bench
