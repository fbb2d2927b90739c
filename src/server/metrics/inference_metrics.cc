#include "server/metrics/inference_metrics.h"

#include <cstdint>
#include <optional>
#include <string>

namespace vramd::metrics {
namespace {

using runtime::FailureReason;
using runtime::InferenceStatsSnapshot;

// A per-version family whose sample is one figure of the snapshot.
struct VersionFamily {
  const char* name;
  const char* help;
  MetricType type;
  int64_t (*value)(const InferenceStatsSnapshot&);
};

int64_t Us(uint64_t ns) { return static_cast<int64_t>(ns / 1000); }

// Triton's names and HELP texts (core: src/metrics.cc).
constexpr VersionFamily kCountFamilies[] = {
    {"nv_inference_count", "Number of inferences performed (does not include cached requests)",
     kCounter, [](const InferenceStatsSnapshot& s) { return int64_t(s.inference_count); }},
    {"nv_inference_exec_count",
     "Number of model executions performed (does not include cached requests)", kCounter,
     [](const InferenceStatsSnapshot& s) { return int64_t(s.execution_count); }},
    {"nv_inference_request_duration_us",
     "Cumulative inference request duration in microseconds (includes cached requests)",
     kCounter, [](const InferenceStatsSnapshot& s) { return Us(s.success.ns); }},
    {"nv_inference_queue_duration_us",
     "Cumulative inference queuing duration in microseconds (includes cached requests)",
     kCounter, [](const InferenceStatsSnapshot& s) { return Us(s.queue.ns); }},
    {"nv_inference_compute_input_duration_us",
     "Cumulative compute input duration in microseconds (does not include cached requests)",
     kCounter, [](const InferenceStatsSnapshot& s) { return Us(s.compute_input.ns); }},
    {"nv_inference_compute_infer_duration_us",
     "Cumulative compute inference duration in microseconds (does not include cached requests)",
     kCounter, [](const InferenceStatsSnapshot& s) { return Us(s.compute_infer.ns); }},
    {"nv_inference_compute_output_duration_us",
     "Cumulative inference compute output duration in microseconds (does not include cached "
     "requests)",
     kCounter, [](const InferenceStatsSnapshot& s) { return Us(s.compute_output.ns); }},
    {"nv_inference_pending_request_count",
     "Instantaneous number of pending requests awaiting execution per-model.", kGauge,
     [](const InferenceStatsSnapshot& s) { return int64_t(s.pending); }},
};

// vramd's own, for sequence models only (docs/sequences.md).
constexpr VersionFamily kSequenceFamilies[] = {
    {"vramd_sequences_live",
     "Sequences started and not yet released (holding a slot or waiting for one)", kGauge,
     [](const InferenceStatsSnapshot& s) { return s.live_sequences; }},
    {"vramd_sequence_idle_releases_total",
     "Sequences released, with their implicit state, for idling past "
     "max_sequence_idle_microseconds",
     kCounter, [](const InferenceStatsSnapshot& s) { return int64_t(s.sequence_idle_releases); }},
};

constexpr FailureReason kReasons[] = {FailureReason::kRejected, FailureReason::kCanceled,
                                      FailureReason::kBackend, FailureReason::kOther};

}  // namespace

void AppendInferenceMetrics(const std::vector<runtime::VersionStatistics>& versions,
                            PrometheusText& out) {
  std::vector<std::string> version_text;
  version_text.reserve(versions.size());
  for (const auto& v : versions) version_text.push_back(std::to_string(v.version));

  out.Family("nv_inference_request_success",
             "Number of successful inference requests, all batch sizes", kCounter);
  for (size_t i = 0; i < versions.size(); ++i) {
    out.Sample({{"model", versions[i].model}, {"version", version_text[i]}},
               versions[i].stats.success.count);
  }
  out.Family("nv_inference_request_failure",
             "Number of failed inference requests, all batch sizes", kCounter);
  for (size_t i = 0; i < versions.size(); ++i) {
    for (FailureReason reason : kReasons) {
      out.Sample({{"model", versions[i].model},
                  {"reason", runtime::FailureReasonName(reason)},
                  {"version", version_text[i]}},
                 versions[i].stats.fail_by_reason[static_cast<int>(reason)]);
    }
  }
  for (const VersionFamily& family : kCountFamilies) {
    out.Family(family.name, family.help, family.type);
    for (size_t i = 0; i < versions.size(); ++i) {
      out.Sample({{"model", versions[i].model}, {"version", version_text[i]}},
                 family.value(versions[i].stats));
    }
  }
  for (const VersionFamily& family : kSequenceFamilies) {
    bool started = false;
    for (size_t i = 0; i < versions.size(); ++i) {
      if (!versions[i].sequences) continue;
      if (!started) out.Family(family.name, family.help, family.type);
      started = true;
      out.Sample({{"model", versions[i].model}, {"version", version_text[i]}},
                 family.value(versions[i].stats));
    }
  }
}

void AppendInferenceMetrics(const runtime::ModelManager& manager, PrometheusText& out) {
  AppendInferenceMetrics(runtime::SnapshotVersions(manager.LoadedVersions()), out);
}

void AppendGpuMetrics(const memory::MemoryReport& report, PrometheusText& out) {
  // `value` gives std::optional<T>: absent where NVML has no figure; bytes stay integers.
  auto family = [&](const char* name, const char* help, auto value) {
    bool started = false;
    for (const memory::DeviceMemoryReport& d : report.devices) {
      if (d.uuid.empty()) continue;  // NVML did not answer for this device
      auto v = value(d);
      if (!v) continue;
      if (!started) out.Family(name, help, kGauge);
      started = true;
      out.Sample({{"gpu_uuid", d.uuid}}, *v);
    }
  };
  family("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)",
         [](const memory::DeviceMemoryReport& d) -> std::optional<double> {
           if (!d.utilization_gpu_percent) return std::nullopt;
           return *d.utilization_gpu_percent / 100.0;
         });
  family("nv_gpu_memory_total_bytes", "GPU total memory, in bytes",
         [](const memory::DeviceMemoryReport& d) -> std::optional<uint64_t> {
           if (!d.nvml_memory) return std::nullopt;
           return d.nvml_memory->total_bytes;
         });
  family("nv_gpu_memory_used_bytes", "GPU used memory, in bytes",
         [](const memory::DeviceMemoryReport& d) -> std::optional<uint64_t> {
           if (!d.nvml_memory) return std::nullopt;
           return d.nvml_memory->used_bytes;
         });
}

}  // namespace vramd::metrics
