#include "server/http/metrics_routes.h"

#include "runtime/custom_metrics.h"

#include "server/metrics/inference_metrics.h"
#include "server/metrics/memory_metrics.h"
#include "server/metrics/prometheus_text.h"
#include "server/metrics/sleep_metrics.h"

namespace vramd::http {

HttpResponse MetricsResponse(const memory::MemoryReportSource& memory,
                             const runtime::ModelManager* manager) {
  metrics::PrometheusText out;
  if (manager != nullptr) metrics::AppendInferenceMetrics(*manager, out);
  const memory::MemoryReport report = memory.Build();
  metrics::AppendGpuMetrics(report, out);
  metrics::AppendMemoryMetrics(report, out);
  if (manager != nullptr) metrics::AppendSleepMetrics(*manager, out);

  HttpResponse response;
  response.status = 200;
  response.content_type = metrics::kPrometheusContentType;
  response.body = out.Take();
  // Models' own families (Triton's custom metrics) last, after every family of vramd's.
  if (manager != nullptr && manager->custom_metrics() != nullptr) {
    response.body += manager->custom_metrics()->PrometheusText();
  }
  return response;
}

}  // namespace vramd::http
