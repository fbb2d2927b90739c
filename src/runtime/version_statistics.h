// VersionStatistics: one model version's inference statistics (inference_statistics.h) taken at
// one moment, with the model name and version they are reported under. The statistics
// extension (GET /v2/models[/{m}[/versions/{v}]]/stats, server/http/stats_routes.h) and the
// nv_inference_* metrics (server/metrics/inference_metrics.h) both render these, so their
// figures agree; it lives here, with what fills it, so neither front end includes the other.
//
// Thread safety: SnapshotVersions is safe from any thread (the statistics are); a
// VersionStatistics is a plain value.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/inference_statistics.h"
#include "runtime/loaded_model.h"

namespace vramd::runtime {

struct VersionStatistics {
  std::string model;
  int64_t version = 0;
  InferenceStatsSnapshot stats;
};

// A snapshot of each version, in the given order. REQUIRES: no element is null.
inline std::vector<VersionStatistics> SnapshotVersions(
    const std::vector<std::shared_ptr<LoadedModel>>& versions) {
  std::vector<VersionStatistics> out;
  out.reserve(versions.size());
  for (const auto& v : versions) {
    out.push_back({v->name(), v->version(), v->statistics().Snapshot()});
  }
  return out;
}

}  // namespace vramd::runtime
