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
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runtime/inference_statistics.h"
#include "runtime/loaded_model.h"
#include "runtime/model_manager.h"

namespace vramd::runtime {

struct VersionStatistics {
  std::string model;
  int64_t version = 0;
  InferenceStatsSnapshot stats;
  bool sequences = false;  // a sequence model (config sequence_batching)
};

// A snapshot of each version, in the given order. REQUIRES: no element is null.
inline std::vector<VersionStatistics> SnapshotVersions(
    const std::vector<std::shared_ptr<LoadedModel>>& versions) {
  std::vector<VersionStatistics> out;
  out.reserve(versions.size());
  for (const auto& v : versions) {
    out.push_back({v->name(), v->version(), v->statistics().Snapshot(),
                   v->config().has_sequence_batching()});
  }
  return out;
}

// The versions a statistics request names, as the statistics extension reads them: `model`
// empty: every ready version of every model (`version` ignored); `version` 0: every ready
// version of `model`; otherwise that version. The manager's Find error (NotFound, Unavailable)
// for a model or version that does not serve.
inline Result<std::vector<VersionStatistics>> StatisticsOf(const ModelManager& manager,
                                                          std::string_view model,
                                                          int64_t version) {
  std::vector<std::shared_ptr<LoadedModel>> versions;
  if (model.empty()) {
    versions = manager.LoadedVersions();
  } else {
    auto found = manager.Find(model, version);
    if (!found.ok()) return found.status();
    if (version != 0) {
      versions.push_back(std::move(found).value());
    } else {
      for (auto& v : manager.LoadedVersions()) {
        if (v->name() == model) versions.push_back(std::move(v));
      }
    }
  }
  return SnapshotVersions(versions);
}

}  // namespace vramd::runtime
