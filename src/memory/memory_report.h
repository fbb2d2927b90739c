// MemoryReport: one picture of where device memory is, joining three sources that never see
// each other's figures:
//   - the Ledger: who owns each live allocation (the owner tree) and what leaked;
//   - the pools (Allocator::PoolStatistics): what vramd holds from the driver (reserved) and
//     hands out (allocated);
//   - NVML: what the device and this process really use.
// Served as JSON at GET /v2/memory (MemoryReportToJson, format in docs/memory.md "The memory
// report"), rendered as Prometheus metrics (server/metrics/memory_metrics.h) and printed by
// `vramctl memory`.
//
// Unattributed bytes, per CUDA device:
//   unattributed = nvml_process_used - pool_reserved - context_baseline
// where context_baseline is NVML's figure for this process right after its CUDA context was
// made, before any pool allocation (MeasureContextBaselines in memory/nvml.h). It is memory
// this process uses that no owner accounts for: kernels loaded lazily after start-up, library
// workspaces (cuBLAS, cuDNN), allocations that bypass the Allocator. It is reported signed and
// never clamped: a negative value means the pools and the baseline claim more than NVML sees
// (the baseline included memory freed since, or NVML's figure lags), and hiding that would hide
// a measurement problem. Absent, with a reason, when NVML has no per-process figure or the
// baseline was not measured.
//
// The sources are read one after another, not atomically: figures taken from different
// sources may differ by what was allocated between the reads.
//
// Thread safety: BuildMemoryReport and MemoryReportToJson are safe from any thread (the sources
// are); a MemoryReport is a plain value.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memory/admission.h"
#include "memory/allocator.h"
#include "memory/caching_pool.h"
#include "memory/device.h"
#include "memory/device_contexts.h"
#include "memory/hosted_processes.h"
#include "memory/native_memory.h"
#include "memory/unattributed_alarm.h"
#include "memory/ledger.h"
#include "memory/nvml.h"

namespace vramd::memory {

// One CUDA device. An optional figure is absent when its source cannot give it; the matching
// *_reason says why.
struct DeviceMemoryReport {
  Device device;
  std::string name;  // NVML's, "" when unknown
  std::string uuid;
  std::optional<NvmlMemoryInfo> nvml_memory;  // the whole device
  std::string nvml_reason;
  std::optional<unsigned> utilization_gpu_percent;
  std::optional<int64_t> process_used_bytes;  // NVML: everything this process uses here
  std::string process_used_reason;
  std::optional<PoolStats> pool;  // absent until something was allocated on the device
  std::optional<int64_t> context_baseline_bytes;
  std::string context_baseline_reason;
  // What models' libraries took outside the pools, measured and charged to their owners
  // (native_memory.h), backends' residues included; 0 without a meter.
  int64_t native_measured_bytes = 0;
  int64_t native_residue_bytes = 0;  // of which what outlived its owners (backend:<name>)
  std::optional<int64_t> unattributed_bytes;  // see the file comment; may be negative
  std::string unattributed_reason;
  // The unattributed figure past the alarm's threshold either way (unattributed_alarm.h);
  // false without an alarm or a figure.
  bool unattributed_alarm = false;
  uint64_t unattributed_alarms_raised = 0;
  // Backend host processes serving models (hosted_processes.h) that NVML lists on this device:
  // their own contexts and libraries' memory, which no ledger holds, under the model they serve.
  // Apart from process_used_bytes (this process's) and so from unattributed.
  struct Hosted {
    uint32_t pid = 0;
    std::string owner;  // the model version's ledger path, "" once it is gone
    std::string label;
    int64_t used_bytes = 0;  // NVML's usedGpuMemory for the pid
  };
  std::vector<Hosted> hosted;
  int64_t hosted_used_bytes = 0;  // their sum
};

// The owner tree, nested: a node per owner still in the ledger.
struct OwnerNode {
  OwnerSnapshot owner;
  std::string path;  // Ledger::OwnerPath
  std::vector<OwnerNode> children;
};

struct MemoryReport {
  std::chrono::system_clock::time_point generated_at;
  bool nvml_available = false;
  std::string nvml_reason;  // why not, when !nvml_available
  int cuda_device_count = 0;
  std::string cuda_reason;  // why there is no CUDA device, when cuda_device_count == 0
  std::vector<DeviceMemoryReport> devices;  // CUDA devices by ordinal
  std::vector<PoolStats> pools;             // every pool, the CPU's and cuda_host's included
  std::optional<OwnerNode> owners;          // the root ("server")
  std::vector<LeakReport> leaks;            // Ledger::Leaks
  uint64_t leaked_bytes_total = 0;
  uint64_t leak_reports_total = 0;
  uint64_t unknown_frees = 0;
  uint64_t quota_refusals_total = 0;  // allocations refused by a quota (memory/quota.h)
  std::vector<Admission::DeviceStats> admission;  // devices with a budget, when admission is on
};

struct MemoryReportOptions {
  // Shown as the NVML reason when `nvml` is null: pass Nvml::Load()'s status message.
  std::string nvml_unavailable_reason = "NVML not loaded";
  // Whose NVML per-process figure to read; 0 means this process.
  uint32_t pid = 0;
  // The report's time, from which allocation ages are counted; unset means now.
  std::optional<std::chrono::system_clock::time_point> now;
  // Native memory charged to instances (native_memory.h), subtracted from unattributed; null:
  // none measured. Must outlive the report source.
  const NativeMemoryMeter* native = nullptr;
  // The server's backend host processes (hosted_processes.h); null: none listed. Must outlive
  // the report source.
  const HostedProcesses* hosted = nullptr;
  // Memory-aware admission (admission.h); null: none. Must outlive the report source.
  const Admission* admission = nullptr;
  // Observes each device's unattributed figure (unattributed_alarm.h); null: no alarm. Must
  // outlive the report source.
  UnattributedAlarm* unattributed_alarm = nullptr;
};

// Reads the ledger, the allocator's pools and NVML (null: unavailable). `baselines` come from
// DeviceContexts::Baselines. Devices listed: every CUDA ordinal that CUDA, NVML, a
// pool or a baseline knows.
MemoryReport BuildMemoryReport(const Ledger& ledger, const Allocator& allocator, const Nvml* nvml,
                               const std::vector<ContextBaseline>& baselines,
                               const MemoryReportOptions& options = {});
// The same from pool statistics already taken.
MemoryReport BuildMemoryReport(const Ledger& ledger, std::vector<PoolStats> pools,
                               const Nvml* nvml, const std::vector<ContextBaseline>& baselines,
                               const MemoryReportOptions& options = {});

// One line on `device` for an out-of-memory message, what the ledger's holders cannot say:
// NVML's free memory of the device, and how this process's use splits into the pools, the
// context, measured native memory and unattributed memory. "" for a device the report does not
// list (the CPU, cuda_host) and "NVML: ..." with the reason when NVML has no figure.
std::string DeviceMemoryNote(const MemoryReport& report, Device device);

// The report as JSON; the shape is documented in docs/memory.md, "The memory report".
std::string MemoryReportToJson(const MemoryReport& report);

// Where routes get a fresh report from, so they need no globals. Implementations must be safe
// to call from any thread.
class MemoryReportSource {
 public:
  virtual ~MemoryReportSource() = default;
  virtual MemoryReport Build() const = 0;
};

// The server's source: the live ledger, allocator and NVML.
class LiveMemoryReportSource final : public MemoryReportSource {
 public:
  // `ledger` and `allocator` must outlive this object, and `nvml` too unless null.
  // `contexts` too, unless null (no baselines: no unattributed figure).
  LiveMemoryReportSource(const Ledger* ledger, const Allocator* allocator, const Nvml* nvml,
                         const DeviceContexts* contexts, MemoryReportOptions options = {})
      : ledger_(ledger),
        allocator_(allocator),
        nvml_(nvml),
        contexts_(contexts),
        options_(std::move(options)) {}

  MemoryReport Build() const override {
    return BuildMemoryReport(*ledger_, *allocator_, nvml_,
                             contexts_ != nullptr ? contexts_->Baselines()
                                                  : std::vector<ContextBaseline>(),
                             options_);
  }

 private:
  const Ledger* const ledger_;
  const Allocator* const allocator_;
  const Nvml* const nvml_;
  const DeviceContexts* const contexts_;
  const MemoryReportOptions options_;
};

}  // namespace vramd::memory
