// Triton's metrics (docs/user_guide/metrics.md in Triton's server repository), with Triton's
// names, types, HELP texts and labels, so that dashboards and alerts written for Triton work
// against vramd. The table with every family is in docs/metrics.md.
//
// Per model version, labels {model, version} (version as a decimal string):
//   nv_inference_request_success            counter  requests answered with success
//   nv_inference_request_failure{reason}    counter  requests answered with an error, one
//                                                    sample per reason: REJECTED, CANCELED,
//                                                    BACKEND, OTHER
//   nv_inference_count                      counter  inferences (samples: a batch of n is n)
//   nv_inference_exec_count                 counter  model executions
//   nv_inference_request_duration_us        counter  cumulative end-to-end time of successful
//                                                    requests, microseconds
//   nv_inference_queue_duration_us          counter  cumulative queue time, microseconds
//   nv_inference_compute_input_duration_us, nv_inference_compute_infer_duration_us,
//   nv_inference_compute_output_duration_us counter  cumulative compute times, microseconds
//   nv_inference_pending_request_count      gauge    requests queued, not yet executing
// Durations are the statistics' nanosecond totals divided by 1000 (rounded down).
// Labels are written in name order, as Triton's Prometheus library writes them.
//
// Per GPU, label {gpu_uuid}, for the devices NVML gives the figure for (families with no such
// device are left out, as Triton leaves them out without GPU metrics):
//   nv_gpu_utilization         gauge  fraction of the last sample period a kernel ran, 0..1
//   nv_gpu_memory_total_bytes  gauge  device memory
//   nv_gpu_memory_used_bytes   gauge  device memory used by every process
//
// Thread safety: pure functions; the ModelManager overload is safe from any thread.
#pragma once

#include <vector>

#include "memory/memory_report.h"
#include "runtime/model_manager.h"
#include "runtime/version_statistics.h"
#include "server/metrics/prometheus_text.h"

namespace vramd::metrics {

// The per-version families above, one sample per version (per version and reason for
// failures), in the given order. Families are written even when `versions` is empty.
void AppendInferenceMetrics(const std::vector<runtime::VersionStatistics>& versions,
                            PrometheusText& out);

// The same for every ready version of every model, sorted by model name, then version.
void AppendInferenceMetrics(const runtime::ModelManager& manager, PrometheusText& out);

// The per-GPU families above.
void AppendGpuMetrics(const memory::MemoryReport& report, PrometheusText& out);

}  // namespace vramd::metrics
