// GET /v2/repository/models/{m}/lifecycle: vramd's view of a model's lifecycle
// (docs/model-control.md), for operators and vramctl:
//
//   {"name": "m", "state": "ready", "reason": "", "serving": ["1"],
//    "history": [{"from": "unloaded", "to": "loading", "reason": "...", "at_ms": <epoch ms>}],
//    "last_load": {"ok": true, "error": "", "versions": ["1"],
//                  "policy": "availability_preserving", "policy_reason": "...",
//                  "predicted_bytes": {"cuda:0": N}, "predicted_from": "...",
//                  "measured_bytes": {"cuda:0": N},
//                  "phases": [{"name": "file_read", "seconds": 0.31, "bytes": N}],
//                  "total_seconds": 1.2, "finished_ms": <epoch ms>}}
//
// Thread safety: a pure function of the manager, which is safe from any thread.
#pragma once

#include <string_view>

#include "runtime/model_manager.h"
#include "server/http/http_server.h"

namespace vramd::http {

// 404 for a model the manager has never seen.
HttpResponse ModelLifecycleResponse(const runtime::ModelManager& manager, std::string_view model);

}  // namespace vramd::http
