// GET /metrics: Prometheus text exposition (format 0.0.4) of the memory report, served on the
// metrics port (--metrics-port, 8002 as in Triton).
//
// Thread safety: safe from any thread if the source is.
#pragma once

#include "memory/memory_report.h"
#include "server/http/http_server.h"

namespace vramd::metrics {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// 200 with the metrics of a fresh report from `source` (see memory_metrics.h).
http::HttpResponse MetricsResponse(const memory::MemoryReportSource& source);

}  // namespace vramd::metrics
