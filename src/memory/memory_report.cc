#include "memory/memory_report.h"

#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>
#include <string_view>

#include "core/json_write.h"
#include "memory/byte_size.h"
#include "memory/cuda_devices.h"
#include "memory/quota.h"

namespace vramd::memory {
namespace {

using Clock = std::chrono::system_clock;

DeviceMemoryReport DeviceReport(int ordinal, const std::vector<PoolStats>& pools,
                                const Nvml* nvml, const std::vector<ContextBaseline>& baselines,
                                const MemoryReportOptions& options, uint32_t pid) {
  DeviceMemoryReport d;
  d.device = Device::Cuda(ordinal);
  for (const PoolStats& p : pools) {
    if (p.device == d.device) d.pool = p;
  }
  if (nvml == nullptr) {
    d.nvml_reason = options.nvml_unavailable_reason;
    d.process_used_reason = options.nvml_unavailable_reason;
  } else {
    if (auto name = nvml->Name(ordinal); name.ok()) d.name = *name;
    if (auto uuid = nvml->Uuid(ordinal); uuid.ok()) d.uuid = *uuid;
    if (auto memory = nvml->DeviceMemory(ordinal); memory.ok()) {
      d.nvml_memory = *memory;
    } else {
      d.nvml_reason = memory.status().message();
    }
    if (auto u = nvml->Utilization(ordinal); u.ok()) d.utilization_gpu_percent = u->gpu_percent;
    if (auto used = nvml->ProcessUsedBytes(ordinal, pid); used.ok()) {
      d.process_used_bytes = static_cast<int64_t>(*used);
    } else {
      d.process_used_reason = used.status().message();
    }
  }
  d.context_baseline_reason = "no CUDA context made by this server";
  for (const ContextBaseline& b : baselines) {
    if (b.ordinal != ordinal) continue;
    d.context_baseline_bytes = b.bytes;
    d.context_baseline_reason = b.bytes ? "" : b.reason;
  }
  if (options.native != nullptr) {
    d.native_measured_bytes = options.native->Total(ordinal);
    d.native_residue_bytes = options.native->ResidueTotal(ordinal);
  }
  if (!d.process_used_bytes) {
    d.unattributed_reason = "no NVML figure for this process: " + d.process_used_reason;
  } else if (!d.context_baseline_bytes) {
    d.unattributed_reason = "no context baseline: " + d.context_baseline_reason;
  } else {
    const int64_t reserved = d.pool ? static_cast<int64_t>(d.pool->reserved_bytes) : 0;
    d.unattributed_bytes = *d.process_used_bytes - reserved - *d.context_baseline_bytes -
                           d.native_measured_bytes;
    if (options.unattributed_alarm != nullptr) {
      const UnattributedAlarm::State alarm =
          options.unattributed_alarm->Observe(ordinal, *d.unattributed_bytes);
      d.unattributed_alarm = alarm.on;
      d.unattributed_alarms_raised = alarm.raised;
    }
  }
  return d;
}

// Nests the ledger's flat snapshot (parents before children). An owner whose parent is not in
// the snapshot hangs under the root.
std::optional<OwnerNode> OwnerTree(const Ledger& ledger) {
  std::vector<OwnerSnapshot> owners = ledger.Snapshot();
  if (owners.empty()) return std::nullopt;
  const OwnerId root = ledger.root();
  std::map<OwnerId, std::vector<size_t>> children;
  std::set<OwnerId> present;
  for (const OwnerSnapshot& o : owners) present.insert(o.id);
  size_t root_index = 0;
  for (size_t i = 0; i < owners.size(); ++i) {
    if (owners[i].id == root) {
      root_index = i;
      continue;
    }
    OwnerId parent = present.count(owners[i].parent) ? owners[i].parent : root;
    children[parent].push_back(i);
  }
  auto build = [&](auto& self, size_t index) -> OwnerNode {
    OwnerNode node;
    node.owner = owners[index];
    node.path = ledger.OwnerPath(node.owner.id);
    for (size_t child : children[node.owner.id]) node.children.push_back(self(self, child));
    return node;
  };
  return build(build, root_index);
}

// ---- JSON ----

template <typename T>
void OptionalInt(JsonWriter& w, std::string_view key, const std::optional<T>& v) {
  WriteJsonKey(w, key);
  if (v) {
    w.Int64(static_cast<int64_t>(*v));
  } else {
    w.Null();
  }
}

void Uint(JsonWriter& w, std::string_view key, uint64_t v) {
  WriteJsonKey(w, key);
  w.Uint64(v);
}

void Int(JsonWriter& w, std::string_view key, int64_t v) {
  WriteJsonKey(w, key);
  w.Int64(v);
}

void Text(JsonWriter& w, std::string_view key, std::string_view v) {
  WriteJsonKey(w, key);
  WriteJsonString(w, v);
}

// "2026-01-02T03:04:05.678Z"
std::string IsoTime(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(std::chrono::floor<std::chrono::seconds>(ms).count());
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  const int64_t frac = ((ms.count() % 1000) + 1000) % 1000;
  return fmt::format("{}.{:03d}Z", buf, frac);
}

void WriteAvailability(JsonWriter& w, std::string_view key, bool available,
                       std::string_view reason) {
  WriteJsonKey(w, key);
  w.StartObject();
  WriteJsonKey(w, "available");
  w.Bool(available);
  Text(w, "reason", available ? "" : reason);
  w.EndObject();
}

void WriteDevice(JsonWriter& w, const DeviceMemoryReport& d) {
  w.StartObject();
  Text(w, "device", d.device.ToString());
  Text(w, "name", d.name);
  Text(w, "uuid", d.uuid);
  WriteAvailability(w, "nvml", d.nvml_memory.has_value(), d.nvml_reason);
  const auto& m = d.nvml_memory;
  OptionalInt(w, "total_bytes", m ? std::optional(m->total_bytes) : std::nullopt);
  OptionalInt(w, "used_bytes", m ? std::optional(m->used_bytes) : std::nullopt);
  OptionalInt(w, "free_bytes", m ? std::optional(m->free_bytes) : std::nullopt);
  OptionalInt(w, "driver_reserved_bytes", m ? m->reserved_bytes : std::nullopt);
  OptionalInt(w, "utilization_gpu_percent", d.utilization_gpu_percent);
  OptionalInt(w, "process_used_bytes", d.process_used_bytes);
  Text(w, "process_used_reason", d.process_used_bytes ? "" : d.process_used_reason);
  const auto& p = d.pool;
  OptionalInt(w, "pool_reserved_bytes", p ? std::optional(p->reserved_bytes) : std::nullopt);
  OptionalInt(w, "pool_allocated_bytes", p ? std::optional(p->allocated_bytes) : std::nullopt);
  OptionalInt(w, "pool_peak_reserved_bytes",
              p ? std::optional(p->peak_reserved_bytes) : std::nullopt);
  OptionalInt(w, "pool_peak_allocated_bytes",
              p ? std::optional(p->peak_allocated_bytes) : std::nullopt);
  OptionalInt(w, "pool_segments", p ? std::optional(p->segments) : std::nullopt);
  WriteJsonKey(w, "pool_fragmentation");
  if (p) {
    w.Double(p->fragmentation);
  } else {
    w.Null();
  }
  OptionalInt(w, "context_baseline_bytes", d.context_baseline_bytes);
  Text(w, "context_baseline_reason", d.context_baseline_bytes ? "" : d.context_baseline_reason);
  Int(w, "native_measured_bytes", d.native_measured_bytes);
  Int(w, "native_residue_bytes", d.native_residue_bytes);
  OptionalInt(w, "unattributed_bytes", d.unattributed_bytes);
  Text(w, "unattributed_reason", d.unattributed_bytes ? "" : d.unattributed_reason);
  WriteJsonKey(w, "unattributed_alarm");
  w.Bool(d.unattributed_alarm);
  Uint(w, "unattributed_alarms_raised", d.unattributed_alarms_raised);
  Int(w, "hosted_used_bytes", d.hosted_used_bytes);
  WriteJsonKey(w, "hosted_processes");
  w.StartArray();
  for (const DeviceMemoryReport::Hosted& h : d.hosted) {
    w.StartObject();
    Int(w, "pid", h.pid);
    Text(w, "owner", h.owner);
    Text(w, "label", h.label);
    Int(w, "used_bytes", h.used_bytes);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

void WritePool(JsonWriter& w, const PoolStats& p) {
  w.StartObject();
  Text(w, "device", p.device.ToString());
  Uint(w, "reserved_bytes", p.reserved_bytes);
  Uint(w, "allocated_bytes", p.allocated_bytes);
  Uint(w, "requested_bytes", p.requested_bytes);
  Uint(w, "peak_reserved_bytes", p.peak_reserved_bytes);
  Uint(w, "peak_allocated_bytes", p.peak_allocated_bytes);
  Uint(w, "segments", p.segments);
  Uint(w, "live_allocations", p.live_allocations);
  Uint(w, "cached_free_bytes", p.cached_free_bytes);
  Uint(w, "largest_free_block_bytes", p.largest_free_block_bytes);
  WriteJsonKey(w, "fragmentation");
  w.Double(p.fragmentation);
  Text(w, "kind", p.decommit_granularity > 0 ? "vmm" : "caching");
  Uint(w, "decommit_granularity", p.decommit_granularity);
  Uint(w, "remappable_free_bytes", p.remappable_free_bytes);
  Uint(w, "hole_bytes", p.hole_bytes);
  Uint(w, "decommits", p.decommits);
  Uint(w, "total_allocations", p.total_allocations);
  Uint(w, "segment_allocations", p.segment_allocations);
  Uint(w, "segment_frees", p.segment_frees);
  Uint(w, "out_of_memory", p.out_of_memory);
  w.EndObject();
}

void WriteOwner(JsonWriter& w, const OwnerNode& node) {
  const OwnerSnapshot& o = node.owner;
  w.StartObject();
  Uint(w, "id", o.id);
  Text(w, "kind", OwnerKindName(o.kind));
  Text(w, "name", o.name);
  Text(w, "path", node.path);
  Int(w, "live_bytes", o.self.live_bytes);
  Int(w, "live_count", o.self.live_count);
  Int(w, "peak_bytes", o.self.peak_bytes);
  Int(w, "total_allocated_bytes", o.self.total_allocated_bytes);
  Int(w, "total_allocations", o.self.total_allocations);
  Int(w, "subtree_live_bytes", o.subtree_live_bytes);
  Int(w, "subtree_live_count", o.subtree_live_count);
  WriteJsonKey(w, "closed");
  w.Bool(o.closed);
  WriteJsonKey(w, "by_device");
  w.StartObject();
  for (const auto& [device, bytes] : o.live_bytes_by_device) Int(w, device.ToString(), bytes);
  w.EndObject();
  if (!o.quota.empty()) {
    WriteJsonKey(w, "quota");
    w.StartArray();
    for (const QuotaUse& q : o.quota) {
      w.StartObject();
      Text(w, "device", QuotaDeviceName(q.device));
      Int(w, "limit_bytes", q.limit_bytes);
      Int(w, "used_bytes", q.used_bytes);
      Uint(w, "refusals", q.refusals);
      w.EndObject();
    }
    w.EndArray();
  }
  if (!o.execution_peaks.empty()) {
    WriteJsonKey(w, "execution_peaks");
    w.StartArray();
    for (const ExecutionPeak& p : o.execution_peaks) {
      w.StartObject();
      Text(w, "device", p.device.ToString());
      Int(w, "batch_size", p.batch_size);
      Int(w, "bytes", p.bytes);
      w.EndObject();
    }
    w.EndArray();
  }
  WriteJsonKey(w, "children");
  w.StartArray();
  for (const OwnerNode& child : node.children) WriteOwner(w, child);
  w.EndArray();
  w.EndObject();
}

void WriteLeak(JsonWriter& w, const LeakReport& leak, Clock::time_point now) {
  w.StartObject();
  Text(w, "owner", leak.owner_path);
  Uint(w, "owner_id", leak.owner);
  Text(w, "kind", OwnerKindName(leak.kind));
  Uint(w, "bytes", leak.bytes);
  Uint(w, "count", leak.count);
  Uint(w, "still_live_bytes", leak.still_live_bytes);
  Text(w, "closed_at", IsoTime(leak.closed_at));
  WriteJsonKey(w, "allocations");
  w.StartArray();
  for (const AllocationInfo& a : leak.allocations) {
    w.StartObject();
    Text(w, "address", fmt::format("{:#x}", a.address));
    Uint(w, "size", a.size);
    Text(w, "device", a.device.ToString());
    Int(w, "age_ms",
        std::chrono::duration_cast<std::chrono::milliseconds>(now - a.time).count());
    WriteJsonKey(w, "backtrace");
    w.StartArray();
    for (const std::string& frame : a.backtrace) WriteJsonString(w, frame);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
}

}  // namespace

MemoryReport BuildMemoryReport(const Ledger& ledger, const Allocator& allocator, const Nvml* nvml,
                               const std::vector<ContextBaseline>& baselines,
                               const MemoryReportOptions& options) {
  return BuildMemoryReport(ledger, allocator.PoolStatistics(), nvml, baselines, options);
}

MemoryReport BuildMemoryReport(const Ledger& ledger, std::vector<PoolStats> pools,
                               const Nvml* nvml, const std::vector<ContextBaseline>& baselines,
                               const MemoryReportOptions& options) {
  MemoryReport r;
  r.generated_at = options.now.value_or(Clock::now());
  r.nvml_available = nvml != nullptr;
  if (!r.nvml_available) r.nvml_reason = options.nvml_unavailable_reason;
  r.cuda_device_count = CudaDeviceCount();
  if (r.cuda_device_count == 0) r.cuda_reason = CudaDescription();

  std::set<int> ordinals;
  for (int i = 0; i < r.cuda_device_count; ++i) ordinals.insert(i);
  for (int i = 0; nvml != nullptr && i < nvml->DeviceCount(); ++i) ordinals.insert(i);
  for (const PoolStats& p : pools) {
    if (p.device.is_cuda()) ordinals.insert(p.device.index);
  }
  for (const ContextBaseline& b : baselines) ordinals.insert(b.ordinal);
  const uint32_t pid = options.pid != 0 ? options.pid : static_cast<uint32_t>(getpid());
  // Without NVML there is no figure to show for a host.
  const std::vector<HostedProcess> hosted = options.hosted != nullptr && nvml != nullptr
                                                ? options.hosted->List()
                                                : std::vector<HostedProcess>();
  for (int ordinal : ordinals) {
    DeviceMemoryReport& d =
        r.devices.emplace_back(DeviceReport(ordinal, pools, nvml, baselines, options, pid));
    // A host that NVML does not list on this device has no context there (a CPU model's, or
    // one that has not touched the device yet): nothing to show.
    for (const HostedProcess& h : hosted) {
      auto used = nvml->ProcessUsedBytes(ordinal, h.pid);
      if (!used.ok()) continue;
      d.hosted.push_back({h.pid, ledger.OwnerPath(h.owner), h.label, static_cast<int64_t>(*used)});
      d.hosted_used_bytes += static_cast<int64_t>(*used);
    }
  }
  std::sort(pools.begin(), pools.end(), [](const PoolStats& a, const PoolStats& b) {
    return std::pair(a.device.type, a.device.index) < std::pair(b.device.type, b.device.index);
  });
  r.pools = std::move(pools);

  r.owners = OwnerTree(ledger);
  r.leaks = ledger.Leaks();
  r.leaked_bytes_total = ledger.leaked_bytes_total();
  r.leak_reports_total = ledger.leak_reports_total();
  r.unknown_frees = ledger.unknown_frees();
  r.quota_refusals_total = ledger.quota_refusals_total();
  if (options.admission != nullptr) r.admission = options.admission->Stats();
  return r;
}

std::string DeviceMemoryNote(const MemoryReport& report, Device device) {
  const DeviceMemoryReport* d = nullptr;
  for (const DeviceMemoryReport& candidate : report.devices) {
    if (candidate.device == device) d = &candidate;
  }
  if (d == nullptr) return "";
  auto bytes = [](int64_t n) {
    return FormatBytes(static_cast<size_t>(std::max<int64_t>(n, 0)));
  };
  std::string note;
  if (d->nvml_memory) {
    note = fmt::format("NVML: {} has {} free of {}", device.ToString(),
                       bytes(static_cast<int64_t>(d->nvml_memory->free_bytes)),
                       bytes(static_cast<int64_t>(d->nvml_memory->total_bytes)));
  } else {
    note = fmt::format("NVML: no figure for {} ({})", device.ToString(), d->nvml_reason);
  }
  if (d->process_used_bytes) {
    note += fmt::format("; this process uses {}: {} in vramd's pool",
                        bytes(*d->process_used_bytes),
                        bytes(d->pool ? static_cast<int64_t>(d->pool->reserved_bytes) : 0));
    if (d->context_baseline_bytes) {
      note += fmt::format(", {} its CUDA context", bytes(*d->context_baseline_bytes));
    }
    if (d->native_measured_bytes > 0) {
      note += fmt::format(", {} libraries' own, charged", bytes(d->native_measured_bytes));
    }
    if (d->unattributed_bytes) {
      note += fmt::format(", {} unattributed", bytes(*d->unattributed_bytes));
    }
  }
  if (d->hosted_used_bytes > 0) {
    note += fmt::format("; backend host processes use {}", bytes(d->hosted_used_bytes));
  }
  return note + ".";
}

std::string MemoryReportToJson(const MemoryReport& report) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  Text(w, "generated_at", IsoTime(report.generated_at));
  WriteAvailability(w, "nvml", report.nvml_available, report.nvml_reason);
  WriteAvailability(w, "cuda", report.cuda_device_count > 0, report.cuda_reason);
  WriteJsonKey(w, "devices");
  w.StartArray();
  for (const DeviceMemoryReport& d : report.devices) WriteDevice(w, d);
  w.EndArray();
  WriteJsonKey(w, "pools");
  w.StartArray();
  for (const PoolStats& p : report.pools) WritePool(w, p);
  w.EndArray();
  WriteJsonKey(w, "owners");
  if (report.owners) {
    WriteOwner(w, *report.owners);
  } else {
    w.Null();
  }
  WriteJsonKey(w, "leaks");
  w.StartArray();
  for (const LeakReport& leak : report.leaks) WriteLeak(w, leak, report.generated_at);
  w.EndArray();
  Uint(w, "leaked_bytes_total", report.leaked_bytes_total);
  Uint(w, "leak_reports_total", report.leak_reports_total);
  Uint(w, "unknown_frees", report.unknown_frees);
  Uint(w, "quota_refusals_total", report.quota_refusals_total);
  WriteJsonKey(w, "admission");
  w.StartArray();
  for (const Admission::DeviceStats& a : report.admission) {
    w.StartObject();
    Text(w, "device", a.device.ToString());
    Int(w, "reserved_bytes", a.reserved_bytes);
    Uint(w, "admitted", a.admitted);
    Uint(w, "waited", a.waited);
    Uint(w, "timed_out", a.timed_out);
    Uint(w, "splits", a.splits);
    Int(w, "wait_ns", a.wait_ns);
    w.EndObject();
  }
  w.EndArray();
  WriteJsonKey(w, "unattributed");
  w.StartArray();
  for (const DeviceMemoryReport& d : report.devices) {
    w.StartObject();
    Text(w, "device", d.device.ToString());
    OptionalInt(w, "bytes", d.unattributed_bytes);
    OptionalInt(w, "nvml_process_used_bytes", d.process_used_bytes);
    Int(w, "pool_reserved_bytes", d.pool ? static_cast<int64_t>(d.pool->reserved_bytes) : 0);
    OptionalInt(w, "context_baseline_bytes", d.context_baseline_bytes);
    Int(w, "native_measured_bytes", d.native_measured_bytes);
    Text(w, "reason", d.unattributed_bytes ? "" : d.unattributed_reason);
    WriteJsonKey(w, "alarm");
    w.Bool(d.unattributed_alarm);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace vramd::memory
