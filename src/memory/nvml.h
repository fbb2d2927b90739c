// Nvml: what the NVIDIA driver says about each GPU and about this process's use of it, through
// NVML (libnvidia-ml.so.1, loaded at run time with dlopen, so vramd runs on machines without a
// driver). vramd uses it for reconciliation only: the ledger says who owns what vramd allocated;
// NVML says what the device and the process really use, and the difference is reported as
// unattributed (see memory/memory_report.h).
//
// Devices are named by CUDA ordinal, as everywhere else in vramd. When CUDA sees devices, each
// ordinal is mapped to its NVML device by PCI bus id (NVML ignores CUDA_VISIBLE_DEVICES and may
// order devices differently); without CUDA, ordinal N is NVML index N.
//
// Pitfalls handled here (see shared/reference/leak-tools.md section 3):
//  - Memory comes from nvmlDeviceGetMemoryInfo_v2 when the driver has it (its `used` excludes
//    driver-reserved memory, reported apart), else from the v1 call (whose `used` includes it).
//  - The process list is bound to the versioned _v3 symbol, falling back to _v2, and is asked
//    again with a larger array while the driver answers INSUFFICIENT_SIZE. Some R535 drivers
//    write a larger entry from _v3 than declared; the entry stride is measured, not assumed.
//  - NVML reports host PIDs: inside a container's PID namespace this process's PID is not in
//    the list, and the per-process figure is Unavailable with a message saying so.
//  - usedGpuMemory NVML_VALUE_NOT_AVAILABLE (WDDM, some containers) is Unavailable, not a number.
//
// Thread safety: NVML is thread-safe and an Nvml object does not change after Load, so every
// method is safe from any thread. The methods are virtual so tests can substitute a fake.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace vramd::memory {

struct NvmlMemoryInfo {
  uint64_t total_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t free_bytes = 0;
  // Memory the driver reserves (firmware, ECC...), from the v2 call; absent with v1, whose
  // used_bytes includes it.
  std::optional<uint64_t> reserved_bytes;
};

struct NvmlUtilization {
  unsigned gpu_percent = 0;     // time a kernel ran, over the last sample period
  unsigned memory_percent = 0;  // time device memory was read or written
};

class Nvml {
 public:
  // Loads libnvidia-ml.so.1 and initializes NVML. Unavailable, with the reason (library not
  // found, a symbol missing, nvmlInit failed and nvmlErrorString's text), on machines without
  // a driver; never crashes.
  static Result<std::unique_ptr<Nvml>> Load();
  // The same from another library path (tests).
  static Result<std::unique_ptr<Nvml>> LoadFrom(const std::string& library);

  virtual ~Nvml() = default;
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Number of devices addressable by ordinal below: the CUDA device count when CUDA sees
  // devices, else NVML's device count.
  virtual int DeviceCount() const = 0;

  // For CUDA ordinal `ordinal`. Unavailable (with NVML's reason) when the device has no NVML
  // handle or the query fails or is not supported (e.g. memory info on SoC iGPUs).
  virtual Result<NvmlMemoryInfo> DeviceMemory(int ordinal) const = 0;
  // usedGpuMemory of compute process `pid` on the device: all the memory the process uses
  // there, its CUDA context and modules included. NotFound when `pid` is not in the list (a
  // container's PID namespace, or no context on that device yet); Unavailable when the driver
  // withholds the figure.
  virtual Result<uint64_t> ProcessUsedBytes(int ordinal, uint32_t pid) const = 0;
  virtual Result<NvmlUtilization> Utilization(int ordinal) const = 0;
  virtual Result<std::string> Name(int ordinal) const = 0;
  virtual Result<std::string> Uuid(int ordinal) const = 0;

 protected:
  Nvml() = default;
};

}  // namespace vramd::memory
