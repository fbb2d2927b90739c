#include "server/metrics/memory_metrics.h"

#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "memory/cuda_devices.h"
#include "memory/quota.h"

namespace vramd::metrics {
namespace {

using memory::DeviceMemoryReport;
using memory::OwnerKind;
using memory::OwnerNode;
using memory::PoolStats;

// model, version, instance, device
using OwnerKey = std::tuple<std::string, std::string, std::string, std::string>;

struct OwnerLabels {
  std::string model, version, instance;
};

void CollectLiveBytes(const OwnerNode& node, OwnerLabels labels,
                      std::map<OwnerKey, int64_t>& out) {
  switch (node.owner.kind) {
    case OwnerKind::kModel:
      labels = {node.owner.name, "", ""};
      break;
    case OwnerKind::kVersion:
      labels.version = node.owner.name;
      labels.instance.clear();
      break;
    case OwnerKind::kInstance:
      labels.instance = node.owner.name;
      break;
    default:
      break;  // server, request, scope: count toward the enclosing labels
  }
  for (const auto& [device, bytes] : node.owner.live_bytes_by_device) {
    out[{labels.model, labels.version, labels.instance, device.ToString()}] += bytes;
  }
  for (const OwnerNode& child : node.children) CollectLiveBytes(child, labels, out);
}

struct QuotaSample {
  OwnerLabels labels;
  memory::QuotaUse use;
};

// Each quota with the labels of the owner that set it (a model version, as configs give them).
void CollectQuotas(const OwnerNode& node, OwnerLabels labels, std::vector<QuotaSample>& out) {
  switch (node.owner.kind) {
    case OwnerKind::kModel: labels = {node.owner.name, "", ""}; break;
    case OwnerKind::kVersion: labels.version = node.owner.name; break;
    case OwnerKind::kInstance: labels.instance = node.owner.name; break;
    default: break;
  }
  for (const memory::QuotaUse& use : node.owner.quota) out.push_back({labels, use});
  for (const OwnerNode& child : node.children) CollectQuotas(child, labels, out);
}

void QuotaFamily(PrometheusText& out, const std::vector<QuotaSample>& quotas,
                 std::string_view name, std::string_view help, MetricType type,
                 const std::function<double(const memory::QuotaUse&)>& value) {
  out.Family(name, help, type);
  for (const QuotaSample& q : quotas) {
    out.Sample({{"device", memory::QuotaDeviceName(q.use.device)},
                {"model", q.labels.model},
                {"version", q.labels.version}},
               value(q.use));
  }
}

// A gauge family over the CUDA devices that have the figure; nothing when none has.
void DeviceGauge(PrometheusText& out, const memory::MemoryReport& report, std::string_view name,
                 std::string_view help,
                 const std::function<std::optional<double>(const DeviceMemoryReport&)>& value,
                 MetricType type = kGauge) {
  bool started = false;
  for (const DeviceMemoryReport& d : report.devices) {
    std::optional<double> v = value(d);
    if (!v) continue;
    if (!started) out.Family(name, help, type);
    started = true;
    const std::string device = d.device.ToString();
    out.Sample({{"device", device}}, *v);
  }
}

void PoolFamily(PrometheusText& out, const memory::MemoryReport& report, std::string_view name,
                std::string_view help, MetricType type,
                const std::function<double(const PoolStats&)>& value) {
  out.Family(name, help, type);
  for (const PoolStats& p : report.pools) {
    const std::string device = p.device.ToString();
    out.Sample({{"device", device}}, value(p));
  }
}

}  // namespace

void AppendMemoryMetrics(const memory::MemoryReport& report, PrometheusText& out) {
  std::map<OwnerKey, int64_t> live;
  if (report.owners) CollectLiveBytes(*report.owners, {}, live);
  out.Family("vramd_memory_live_bytes",
             "Live bytes charged by the memory ledger, by nearest model, version and instance "
             "owner and by device.",
             kGauge);
  for (const auto& [key, bytes] : live) {
    const auto& [model, version, instance, device] = key;
    out.Sample({{"model", model}, {"version", version}, {"instance", instance}, {"device", device}},
               bytes);
  }

  std::vector<QuotaSample> quotas;
  if (report.owners) CollectQuotas(*report.owners, {}, quotas);
  QuotaFamily(out, quotas, "vramd_memory_quota_bytes",
              "A model version's memory quota on a device (parameter vramd.memory_quota).",
              kGauge, [](const memory::QuotaUse& q) { return static_cast<double>(q.limit_bytes); });
  QuotaFamily(out, quotas, "vramd_memory_quota_used_bytes",
              "Live bytes counted against a model version's memory quota on a device.", kGauge,
              [](const memory::QuotaUse& q) { return static_cast<double>(q.used_bytes); });
  QuotaFamily(out, quotas, "vramd_memory_quota_refusals_total",
              "Allocations a model version's memory quota refused on a device.", kCounter,
              [](const memory::QuotaUse& q) { return static_cast<double>(q.refusals); });

  if (!report.admission.empty()) {
    out.Family("vramd_memory_admission_reserved_bytes",
               "Predicted peaks of the executions admitted on a device with a budget and not yet "
               "ended.",
               kGauge);
    for (const auto& a : report.admission) {
      out.Sample({{"device", a.device.ToString()}}, static_cast<double>(a.reserved_bytes));
    }
    out.Family("vramd_memory_admission_waits_total",
               "Executions that waited for memory before they started.", kCounter);
    for (const auto& a : report.admission) {
      out.Sample({{"device", a.device.ToString()}}, static_cast<double>(a.waited));
    }
    out.Family("vramd_memory_admission_timeouts_total",
               "Executions whose deadline came while they waited for memory.", kCounter);
    for (const auto& a : report.admission) {
      out.Sample({{"device", a.device.ToString()}}, static_cast<double>(a.timed_out));
    }
    out.Family("vramd_memory_admission_splits_total",
               "Batches split into smaller executions because they could never fit whole.",
               kCounter);
    for (const auto& a : report.admission) {
      out.Sample({{"device", a.device.ToString()}}, static_cast<double>(a.splits));
    }
  }

  out.Family("vramd_memory_leaked_bytes_total",
             "Bytes still held by owners when they closed, summed over every leak report.",
             kCounter);
  out.Sample({}, report.leaked_bytes_total);
  out.Family("vramd_memory_leak_reports_total", "Leak reports filed by the memory ledger.",
             kCounter);
  out.Sample({}, report.leak_reports_total);
  out.Family("vramd_memory_unknown_frees_total",
             "Frees of pointers the memory ledger did not know.", kCounter);
  out.Sample({}, report.unknown_frees);

  const memory::CopiedBytes copied = memory::CopiedBytesTotal();
  out.Family("vramd_copy_bytes_total",
             "Bytes vramd copied between host and GPU memory (h2d, d2h) or between GPU buffers "
             "(d2d), for requests and backends' copies through the server.",
             kCounter);
  out.Sample({{"direction", "h2d"}}, copied.host_to_device);
  out.Sample({{"direction", "d2h"}}, copied.device_to_host);
  out.Sample({{"direction", "d2d"}}, copied.device_to_device);

  PoolFamily(out, report, "vramd_pool_reserved_bytes",
             "Bytes the pool holds from the device driver or system, in segments.", kGauge,
             [](const PoolStats& p) { return static_cast<double>(p.reserved_bytes); });
  PoolFamily(out, report, "vramd_pool_allocated_bytes",
             "Bytes the pool has handed out (rounded sizes).", kGauge,
             [](const PoolStats& p) { return static_cast<double>(p.allocated_bytes); });
  PoolFamily(out, report, "vramd_pool_peak_reserved_bytes", "Highest reserved bytes seen.",
             kGauge, [](const PoolStats& p) { return static_cast<double>(p.peak_reserved_bytes); });
  PoolFamily(out, report, "vramd_pool_peak_allocated_bytes", "Highest allocated bytes seen.",
             kGauge,
             [](const PoolStats& p) { return static_cast<double>(p.peak_allocated_bytes); });
  PoolFamily(out, report, "vramd_pool_segments", "Segments the pool holds.", kGauge,
             [](const PoolStats& p) { return static_cast<double>(p.segments); });
  PoolFamily(out, report, "vramd_pool_fragmentation_ratio",
             "1 - what one request could have / cached free bytes: 0 when free cache is one "
             "block (or, in a VMM pool, whole granules).",
             kGauge, [](const PoolStats& p) { return p.fragmentation; });
  PoolFamily(out, report, "vramd_pool_decommitted_bytes",
             "VMM pool: address space kept whose memory went back to the driver (holes).",
             kGauge, [](const PoolStats& p) { return static_cast<double>(p.hole_bytes); });
  PoolFamily(out, report, "vramd_pool_out_of_memory_total",
             "Allocations the pool failed for lack of memory.", kCounter,
             [](const PoolStats& p) { return static_cast<double>(p.out_of_memory); });

  auto bytes = [](const std::optional<int64_t>& v) -> std::optional<double> {
    return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
  };
  DeviceGauge(out, report, "vramd_memory_context_baseline_bytes",
              "NVML's figure for this process right after its CUDA context was made.",
              [&](const DeviceMemoryReport& d) { return bytes(d.context_baseline_bytes); });
  DeviceGauge(out, report, "vramd_memory_native_measured_bytes",
              "Device memory instances' libraries took outside the pools, measured by NVML and "
              "charged to them.",
              [&](const DeviceMemoryReport& d) {
                return std::optional<double>(static_cast<double>(d.native_measured_bytes));
              });
  DeviceGauge(out, report, "vramd_memory_native_residue_bytes",
              "Of the native memory, what outlived the owners that made it (modules, pooled "
              "handles), charged to its backend.",
              [&](const DeviceMemoryReport& d) {
                return std::optional<double>(static_cast<double>(d.native_residue_bytes));
              });
  DeviceGauge(out, report, "vramd_memory_unattributed_bytes",
              "NVML process bytes minus pool reserved minus context baseline minus native "
              "measured (may be negative).",
              [&](const DeviceMemoryReport& d) { return bytes(d.unattributed_bytes); });
  DeviceGauge(out, report, "vramd_memory_unattributed_alarm",
              "1 while the unattributed figure is past the alarm's threshold either way "
              "(--memory-unattributed-alarm), else 0.",
              [&](const DeviceMemoryReport& d) -> std::optional<double> {
                if (!d.unattributed_bytes) return std::nullopt;
                return d.unattributed_alarm ? 1.0 : 0.0;
              });
  DeviceGauge(
      out, report, "vramd_memory_unattributed_alarms_total",
      "Times the unattributed memory alarm was raised.",
      [&](const DeviceMemoryReport& d) -> std::optional<double> {
        if (!d.unattributed_bytes) return std::nullopt;
        return static_cast<double>(d.unattributed_alarms_raised);
      },
      kCounter);

  out.Family("vramd_hosted_process_gpu_used_bytes",
             "Device memory NVML reports for a backend host process (stub) serving a model: "
             "its own CUDA context and what its libraries took, by host pid and the model "
             "version's ledger owner.",
             kGauge);
  for (const DeviceMemoryReport& d : report.devices) {
    for (const DeviceMemoryReport::Hosted& h : d.hosted) {
      out.Sample({{"device", d.device.ToString()}, {"pid", std::to_string(h.pid)}, {"owner", h.owner}},
                 static_cast<double>(h.used_bytes));
    }
  }

  out.Family("vramd_nvml_available", "1 when NVML answers, 0 when it is unavailable.", kGauge);
  out.Sample({}, report.nvml_available ? 1 : 0);
  auto nvml = [](auto field) {
    return [field](const DeviceMemoryReport& d) -> std::optional<double> {
      if (!d.nvml_memory) return std::nullopt;
      return static_cast<double>((*d.nvml_memory).*field);
    };
  };
  DeviceGauge(out, report, "vramd_gpu_memory_total_bytes", "Device memory, from NVML.",
              nvml(&memory::NvmlMemoryInfo::total_bytes));
  DeviceGauge(out, report, "vramd_gpu_memory_used_bytes",
              "Device memory used by every process, from NVML.",
              nvml(&memory::NvmlMemoryInfo::used_bytes));
  DeviceGauge(out, report, "vramd_gpu_memory_free_bytes", "Free device memory, from NVML.",
              nvml(&memory::NvmlMemoryInfo::free_bytes));
  DeviceGauge(out, report, "vramd_gpu_process_memory_used_bytes",
              "Device memory this process uses, from NVML (context included).",
              [&](const DeviceMemoryReport& d) { return bytes(d.process_used_bytes); });
  DeviceGauge(out, report, "vramd_gpu_utilization_ratio",
              "Fraction of the last sample period a kernel ran, from NVML.",
              [](const DeviceMemoryReport& d) -> std::optional<double> {
                if (!d.utilization_gpu_percent) return std::nullopt;
                return *d.utilization_gpu_percent / 100.0;
              });
}

std::string RenderMemoryMetrics(const memory::MemoryReport& report) {
  PrometheusText out;
  AppendMemoryMetrics(report, out);
  return out.Take();
}

}  // namespace vramd::metrics
