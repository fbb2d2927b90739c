// The memory report as Prometheus metrics (text format 0.0.4), for GET /metrics.
//
// Families (labels in braces):
//   vramd_memory_live_bytes{model,version,instance,device}  gauge. Live bytes the ledger
//       charges to owners, by nearest model / version / instance and device. Each live byte is
//       in exactly one sample: requests and scopes count toward their instance (or the nearest
//       of version, model), and what the server itself owns has empty model, version and
//       instance. Summing over every label gives all live ledger bytes.
//   vramd_memory_leaked_bytes_total, vramd_memory_leak_reports_total,
//   vramd_memory_unknown_frees_total                         counters
//   vramd_pool_reserved_bytes, vramd_pool_allocated_bytes, vramd_pool_peak_reserved_bytes,
//   vramd_pool_peak_allocated_bytes, vramd_pool_segments, vramd_pool_fragmentation_ratio,
//   vramd_pool_decommitted_bytes (a VMM pool's holes)
//                                                           gauges {device}, CPU pool included
//   vramd_pool_out_of_memory_total{device}                  counter
//   vramd_memory_context_baseline_bytes{device}, vramd_memory_native_measured_bytes{device},
//   vramd_memory_native_residue_bytes{device}, vramd_memory_unattributed_bytes{device},
//   vramd_memory_unattributed_alarm{device}
//       gauges, only for devices where they are known (see memory/memory_report.h); the
//       unattributed figure may be negative; the alarm is 1 or 0 (memory/unattributed_alarm.h).
//   vramd_memory_unattributed_alarms_total{device}         counter, where the figure is known
//   vramd_nvml_available                                    gauge, 1 or 0
//   vramd_gpu_memory_total_bytes, vramd_gpu_memory_used_bytes, vramd_gpu_memory_free_bytes,
//   vramd_gpu_process_memory_used_bytes, vramd_gpu_utilization_ratio
//       gauges {device}, from NVML, only for devices where NVML gives them.
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "memory/memory_report.h"
#include "server/metrics/prometheus_text.h"

namespace vramd::metrics {

// Appends the families above to `out`.
void AppendMemoryMetrics(const memory::MemoryReport& report, PrometheusText& out);

// The families above as a whole exposition.
std::string RenderMemoryMetrics(const memory::MemoryReport& report);

}  // namespace vramd::metrics
