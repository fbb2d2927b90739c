#include "server/metrics/metrics_routes.h"

#include "server/metrics/inference_metrics.h"
#include "server/metrics/memory_metrics.h"
#include "server/metrics/prometheus_text.h"

namespace vramd::metrics {

http::HttpResponse MetricsResponse(const memory::MemoryReportSource& memory,
                                   const runtime::ModelManager* manager) {
  PrometheusText out;
  if (manager != nullptr) AppendInferenceMetrics(*manager, out);
  const memory::MemoryReport report = memory.Build();
  AppendGpuMetrics(report, out);
  AppendMemoryMetrics(report, out);

  http::HttpResponse response;
  response.status = 200;
  response.content_type = kPrometheusContentType;
  response.body = out.Take();
  return response;
}

}  // namespace vramd::metrics
