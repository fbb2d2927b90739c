// GET /v2/models[/{m}[/versions/{v}]]/stats: Triton's statistics extension
// (docs/protocol/extension_statistics.md), shape in docs/metrics.md:
//
//   {"model_stats": [{"name": "m", "version": "1", "last_inference": <ms since the epoch>,
//                     "inference_count": N, "execution_count": N,
//                     "inference_stats": {"success": {"count", "ns"}, "fail", "queue",
//                                         "compute_input", "compute_infer", "compute_output",
//                                         "cache_hit", "cache_miss"},
//                     "response_stats": {},
//                     "batch_stats": [{"batch_size", "compute_input", "compute_infer",
//                                      "compute_output"}],
//                     "memory_usage": []}]}
//
// Versions are strings, as Triton writes them; one entry per ready version the request names,
// sorted by model name, then version. vramd has no response cache and no decoupled models, so
// cache_hit and cache_miss stay zero and response_stats empty; memory_usage is empty (vramd's
// per-version device memory is in GET /v2/memory and the vramd_memory_live_bytes metric).
//
// Thread safety: pure functions; ModelStatsResponse is safe from any thread (the manager is).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/model_manager.h"
#include "runtime/version_statistics.h"
#include "server/http/http_server.h"

namespace vramd::http {

// The JSON above for `versions`, in their order.
std::string ModelStatsToJson(const std::vector<runtime::VersionStatistics>& versions);

// `model` empty: every ready version of every model (`version` is ignored). `version` 0: every
// ready version of `model`. Errors are {"error": ...} from the manager's Find: 404 for an
// unknown model or version, 503 for a model or version that is not ready.
HttpResponse ModelStatsResponse(const runtime::ModelManager& manager, std::string_view model,
                                int64_t version);

}  // namespace vramd::http
