#include "server/metrics/metrics_routes.h"

#include "server/metrics/memory_metrics.h"

namespace vramd::metrics {

http::HttpResponse MetricsResponse(const memory::MemoryReportSource& source) {
  http::HttpResponse response;
  response.status = 200;
  response.content_type = kPrometheusContentType;
  response.body = RenderMemoryMetrics(source.Build());
  return response;
}

}  // namespace vramd::metrics
