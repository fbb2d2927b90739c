// GET /metrics: Prometheus text exposition (format 0.0.4), served on the metrics port
// (--metrics-port, 8002 as in Triton). One page holds, in this order:
//   - Triton's per-model families, nv_inference_* (inference_metrics.h), when a model manager
//     is given;
//   - Triton's per-GPU families, nv_gpu_* (inference_metrics.h);
//   - vramd's memory families, vramd_* (memory_metrics.h), among them the per-model device
//     memory Triton does not have: vramd_memory_live_bytes{model,version,instance,device};
//   - the models' own families (Triton's custom metrics, runtime/custom_metrics.h), when the
//     manager has a registry.
// Every family is listed in docs/metrics.md. The families are written by server/metrics/, which
// knows nothing of HTTP; this route only serves them.
//
// Thread safety: safe from any thread if the source and the manager are.
#pragma once

#include "memory/memory_report.h"
#include "runtime/model_manager.h"
#include "server/http/http_server.h"

namespace vramd::http {

// 200 with the metrics above, from a fresh report from `memory` and the statistics of every
// ready version `manager` holds. `manager` may be null: the nv_inference_* families are then
// left out.
// The page's Content-Type is metrics::kPrometheusContentType.
HttpResponse MetricsResponse(const memory::MemoryReportSource& memory,
                             const runtime::ModelManager* manager = nullptr);

}  // namespace vramd::http
