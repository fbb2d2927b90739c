// NVML through dlopen. No nvml.h is needed to build: the few types and functions used are
// declared below with the layouts of NVML's public header (the v1 and v2 memory structs, the
// v2/v3 process entry, the utilization struct), and every function is bound by its versioned
// symbol name, so a newer header's #defines cannot change which ABI is called.
#include "memory/nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "memory/cuda_devices.h"

namespace vramd::memory {
namespace {

// ---- The NVML ABI, as far as vramd uses it. ----
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;

constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ULL;
constexpr unsigned kNvmlNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kNvmlUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

struct NvmlMemoryV1 {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct NvmlMemoryV2 {  // nvmlMemory_v2_t
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// NVML_STRUCT_VERSION(Memory, 2)
constexpr unsigned kNvmlMemoryV2Version = static_cast<unsigned>(sizeof(NvmlMemoryV2)) | (2u << 24);

struct NvmlUtilizationRates {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};

struct NvmlProcessInfo {  // nvmlProcessInfo_v2_t, also what _v3 is declared to write
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
static_assert(sizeof(NvmlProcessInfo) == 24);
static_assert(offsetof(NvmlProcessInfo, usedGpuMemory) == 8);
// R535-era _v3 entries carry usedGpuCcProtectedMemory after the same prefix.
constexpr size_t kWideProcessInfoSize = 32;

using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using ErrorStringFn = const char* (*)(nvmlReturn_t);
using GetCountFn = nvmlReturn_t (*)(unsigned int*);
using GetHandleByIndexFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using GetHandleByPciBusIdFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using GetMemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t, NvmlMemoryV1*);
using GetMemoryInfoV2Fn = nvmlReturn_t (*)(nvmlDevice_t, NvmlMemoryV2*);
using GetProcessesFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, void*);
using GetUtilizationFn = nvmlReturn_t (*)(nvmlDevice_t, NvmlUtilizationRates*);
using GetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);

struct DlCloser {
  void operator()(void* handle) const { dlclose(handle); }
};
using DlHandle = std::unique_ptr<void, DlCloser>;

struct Functions {
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  ErrorStringFn error_string = nullptr;
  GetCountFn get_count = nullptr;
  GetHandleByIndexFn handle_by_index = nullptr;
  GetHandleByPciBusIdFn handle_by_pci = nullptr;  // optional
  GetMemoryInfoFn memory_v1 = nullptr;
  GetMemoryInfoV2Fn memory_v2 = nullptr;  // optional
  GetProcessesFn processes = nullptr;     // optional: _v3, else _v2
  const char* processes_symbol = "";
  GetUtilizationFn utilization = nullptr;  // optional
  GetStringFn name = nullptr;              // optional
  GetStringFn uuid = nullptr;              // optional
};

template <typename Fn>
Fn Symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

// Which entry size the driver wrote: the declared 24 bytes, or 32 (R535 _v3). `buffer` was
// filled with kSentinel before the call; a driver writing 24-byte entries leaves the bytes after
// count*24 untouched. The 32-byte reading is taken only when it also looks sane.
constexpr unsigned char kSentinel = 0xAA;

size_t DetectStride(const std::vector<unsigned char>& buffer, unsigned count) {
  const size_t narrow_end = size_t{count} * sizeof(NvmlProcessInfo);
  const size_t wide_end = size_t{count} * kWideProcessInfoSize;
  bool touched = false;
  for (size_t i = narrow_end; i < wide_end; ++i) touched |= buffer[i] != kSentinel;
  if (!touched) return sizeof(NvmlProcessInfo);
  for (unsigned k = 0; k < count; ++k) {
    unsigned pid = 0;
    std::memcpy(&pid, buffer.data() + k * kWideProcessInfoSize, sizeof(pid));
    if (pid == 0) return sizeof(NvmlProcessInfo);
  }
  return kWideProcessInfoSize;
}

struct ProcessEntry {
  uint32_t pid = 0;
  uint64_t used_bytes = 0;
};

class NvmlLibrary final : public Nvml {
 public:
  NvmlLibrary(DlHandle lib, Functions fns, std::vector<nvmlDevice_t> handles,
              std::vector<std::string> handle_errors)
      : lib_(std::move(lib)),
        fns_(fns),
        handles_(std::move(handles)),
        handle_errors_(std::move(handle_errors)) {}

  ~NvmlLibrary() override { fns_.shutdown(); }  // before lib_ is closed

  int DeviceCount() const override { return static_cast<int>(handles_.size()); }

  Result<NvmlMemoryInfo> DeviceMemory(int ordinal) const override {
    VRAMD_ASSIGN_OR_RETURN(nvmlDevice_t device, Handle(ordinal));
    NvmlMemoryInfo info;
    if (fns_.memory_v2 != nullptr) {
      NvmlMemoryV2 m{};
      m.version = kNvmlMemoryV2Version;
      if (fns_.memory_v2(device, &m) == kNvmlSuccess) {
        info.total_bytes = m.total;
        info.used_bytes = m.used;
        info.free_bytes = m.free;
        info.reserved_bytes = m.reserved;
        return info;
      }
      // Drivers that export the symbol but reject the version fall through to v1.
    }
    NvmlMemoryV1 m{};
    nvmlReturn_t rc = fns_.memory_v1(device, &m);
    if (rc != kNvmlSuccess) return Failed("nvmlDeviceGetMemoryInfo", ordinal, rc);
    info.total_bytes = m.total;
    info.used_bytes = m.used;
    info.free_bytes = m.free;
    return info;
  }

  Result<uint64_t> ProcessUsedBytes(int ordinal, uint32_t pid) const override {
    VRAMD_ASSIGN_OR_RETURN(nvmlDevice_t device, Handle(ordinal));
    VRAMD_ASSIGN_OR_RETURN(std::vector<ProcessEntry> processes, ComputeProcesses(device, ordinal));
    for (const ProcessEntry& p : processes) {
      if (p.pid != pid) continue;
      if (p.used_bytes == kNvmlValueNotAvailable) {
        return Status::Unavailable(fmt::format(
            "cuda:{}: NVML withholds the memory of pid {} (NVML_VALUE_NOT_AVAILABLE: a "
            "container without the host PID namespace, or WDDM)",
            ordinal, pid));
      }
      return p.used_bytes;
    }
    return Status::NotFound(fmt::format(
        "cuda:{}: pid {} is not among the {} compute process(es) NVML lists (no CUDA context "
        "there yet, or a container's PID namespace: NVML reports host PIDs; run the container "
        "with --pid=host)",
        ordinal, pid, processes.size()));
  }

  Result<NvmlUtilization> Utilization(int ordinal) const override {
    VRAMD_ASSIGN_OR_RETURN(nvmlDevice_t device, Handle(ordinal));
    if (fns_.utilization == nullptr) return Missing("nvmlDeviceGetUtilizationRates");
    NvmlUtilizationRates u{};
    nvmlReturn_t rc = fns_.utilization(device, &u);
    if (rc != kNvmlSuccess) return Failed("nvmlDeviceGetUtilizationRates", ordinal, rc);
    return NvmlUtilization{u.gpu, u.memory};
  }

  Result<std::string> Name(int ordinal) const override {
    return String(fns_.name, "nvmlDeviceGetName", kNvmlNameBufferSize, ordinal);
  }

  Result<std::string> Uuid(int ordinal) const override {
    return String(fns_.uuid, "nvmlDeviceGetUUID", kNvmlUuidBufferSize, ordinal);
  }

 private:
  Result<nvmlDevice_t> Handle(int ordinal) const {
    if (ordinal < 0 || ordinal >= DeviceCount()) {
      return Status::Unavailable(
          fmt::format("cuda:{}: no such device ({} known to NVML)", ordinal, DeviceCount()));
    }
    if (handles_[ordinal] == nullptr) return Status::Unavailable(handle_errors_[ordinal]);
    return handles_[ordinal];
  }

  std::string ErrorString(nvmlReturn_t rc) const {
    const char* s = fns_.error_string(rc);
    return s != nullptr ? fmt::format("{} ({})", s, rc) : fmt::format("NVML error {}", rc);
  }

  Status Failed(const char* call, int ordinal, nvmlReturn_t rc) const {
    return Status::Unavailable(fmt::format("cuda:{}: {}: {}", ordinal, call, ErrorString(rc)));
  }

  static Status Missing(const char* symbol) {
    return Status::Unavailable(fmt::format("the NVIDIA driver's NVML lacks {}", symbol));
  }

  Result<std::string> String(GetStringFn fn, const char* call, unsigned size, int ordinal) const {
    VRAMD_ASSIGN_OR_RETURN(nvmlDevice_t device, Handle(ordinal));
    if (fn == nullptr) return Missing(call);
    std::vector<char> buffer(size, '\0');
    nvmlReturn_t rc = fn(device, buffer.data(), size);
    if (rc != kNvmlSuccess) return Failed(call, ordinal, rc);
    buffer.back() = '\0';
    return std::string(buffer.data());
  }

  // The compute processes on `device`. The list changes while we ask, so INSUFFICIENT_SIZE is
  // answered with a larger array, a few times.
  Result<std::vector<ProcessEntry>> ComputeProcesses(nvmlDevice_t device, int ordinal) const {
    if (fns_.processes == nullptr) {
      return Missing("nvmlDeviceGetComputeRunningProcesses_v3 and _v2");
    }
    unsigned capacity = 16;
    for (int attempt = 0; attempt < 6; ++attempt) {
      // Room for wide entries, so a driver writing them stays inside the buffer.
      std::vector<unsigned char> buffer(size_t{capacity} * kWideProcessInfoSize, kSentinel);
      unsigned count = capacity;
      nvmlReturn_t rc = fns_.processes(device, &count, buffer.data());
      if (rc == kNvmlErrorInsufficientSize) {
        capacity = std::max(count, capacity) * 2;
        continue;
      }
      if (rc != kNvmlSuccess) return Failed(fns_.processes_symbol, ordinal, rc);
      count = std::min(count, capacity);
      const size_t stride = DetectStride(buffer, count);
      std::vector<ProcessEntry> entries(count);
      for (unsigned k = 0; k < count; ++k) {
        const unsigned char* entry = buffer.data() + k * stride;
        unsigned pid = 0;
        unsigned long long used = 0;
        std::memcpy(&pid, entry + offsetof(NvmlProcessInfo, pid), sizeof(pid));
        std::memcpy(&used, entry + offsetof(NvmlProcessInfo, usedGpuMemory), sizeof(used));
        entries[k] = {pid, used};
      }
      return entries;
    }
    return Status::Unavailable(
        fmt::format("cuda:{}: {}: the process list kept growing", ordinal, fns_.processes_symbol));
  }

  // Constant after construction.
  DlHandle lib_;
  const Functions fns_;
  const std::vector<nvmlDevice_t> handles_;        // by CUDA ordinal; null when unmapped
  const std::vector<std::string> handle_errors_;  // why a handle is null
};

}  // namespace

Result<std::unique_ptr<Nvml>> Nvml::Load() { return LoadFrom("libnvidia-ml.so.1"); }

Result<std::unique_ptr<Nvml>> Nvml::LoadFrom(const std::string& library) {
  dlerror();
  DlHandle lib(dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (lib == nullptr) {
    const char* why = dlerror();
    return Status::Unavailable(fmt::format("NVML unavailable: cannot load {} ({})", library,
                                           why != nullptr ? why : "unknown reason"));
  }
  void* l = lib.get();
  Functions f;
  f.init = Symbol<InitFn>(l, "nvmlInit_v2");
  f.shutdown = Symbol<ShutdownFn>(l, "nvmlShutdown");
  f.error_string = Symbol<ErrorStringFn>(l, "nvmlErrorString");
  f.get_count = Symbol<GetCountFn>(l, "nvmlDeviceGetCount_v2");
  f.handle_by_index = Symbol<GetHandleByIndexFn>(l, "nvmlDeviceGetHandleByIndex_v2");
  f.memory_v1 = Symbol<GetMemoryInfoFn>(l, "nvmlDeviceGetMemoryInfo");
  const std::pair<const char*, bool> required[] = {
      {"nvmlInit_v2", f.init != nullptr},
      {"nvmlShutdown", f.shutdown != nullptr},
      {"nvmlErrorString", f.error_string != nullptr},
      {"nvmlDeviceGetCount_v2", f.get_count != nullptr},
      {"nvmlDeviceGetHandleByIndex_v2", f.handle_by_index != nullptr},
      {"nvmlDeviceGetMemoryInfo", f.memory_v1 != nullptr},
  };
  for (const auto& [name, found] : required) {
    if (!found) {
      return Status::Unavailable(fmt::format(
          "NVML unavailable: {} lacks {} (driver too old?)", library, name));
    }
  }
  f.handle_by_pci = Symbol<GetHandleByPciBusIdFn>(l, "nvmlDeviceGetHandleByPciBusId_v2");
  f.memory_v2 = Symbol<GetMemoryInfoV2Fn>(l, "nvmlDeviceGetMemoryInfo_v2");
  f.processes = Symbol<GetProcessesFn>(l, "nvmlDeviceGetComputeRunningProcesses_v3");
  f.processes_symbol = "nvmlDeviceGetComputeRunningProcesses_v3";
  if (f.processes == nullptr) {
    f.processes = Symbol<GetProcessesFn>(l, "nvmlDeviceGetComputeRunningProcesses_v2");
    f.processes_symbol = "nvmlDeviceGetComputeRunningProcesses_v2";
  }
  f.utilization = Symbol<GetUtilizationFn>(l, "nvmlDeviceGetUtilizationRates");
  f.name = Symbol<GetStringFn>(l, "nvmlDeviceGetName");
  f.uuid = Symbol<GetStringFn>(l, "nvmlDeviceGetUUID");

  nvmlReturn_t rc = f.init();
  if (rc != kNvmlSuccess) {
    const char* s = f.error_string(rc);
    return Status::Unavailable(fmt::format("NVML unavailable: nvmlInit_v2 failed: {} ({})",
                                           s != nullptr ? s : "unknown error", rc));
  }
  // From here on nvmlShutdown must run on every path: NvmlLibrary's destructor does it.
  unsigned nvml_count = 0;
  if (f.get_count(&nvml_count) != kNvmlSuccess) nvml_count = 0;

  std::vector<nvmlDevice_t> handles;
  std::vector<std::string> errors;
  const int cuda_count = CudaDeviceCount();
  if (cuda_count > 0) {
    // CUDA ordinals: match by PCI bus id, never by position (CUDA_VISIBLE_DEVICES reorders).
    for (int i = 0; i < cuda_count; ++i) {
      nvmlDevice_t handle = nullptr;
      std::string error;
      Result<std::string> bus = CudaPciBusId(i);
      if (!bus.ok()) {
        error = bus.status().message();
      } else if (f.handle_by_pci == nullptr) {
        error = "the NVIDIA driver's NVML lacks nvmlDeviceGetHandleByPciBusId_v2";
      } else if (nvmlReturn_t r = f.handle_by_pci(bus->c_str(), &handle); r != kNvmlSuccess) {
        const char* s = f.error_string(r);
        error = fmt::format("cuda:{}: no NVML device at PCI bus id {}: {}", i, *bus,
                            s != nullptr ? s : "unknown error");
        handle = nullptr;
      }
      if (handle == nullptr) spdlog::warn("NVML: {}", error);
      handles.push_back(handle);
      errors.push_back(std::move(error));
    }
  } else {
    for (unsigned i = 0; i < nvml_count; ++i) {
      nvmlDevice_t handle = nullptr;
      std::string error;
      if (nvmlReturn_t r = f.handle_by_index(i, &handle); r != kNvmlSuccess) {
        const char* s = f.error_string(r);
        error = fmt::format("NVML device {}: {}", i, s != nullptr ? s : "unknown error");
        handle = nullptr;
      }
      handles.push_back(handle);
      errors.push_back(std::move(error));
    }
  }
  return std::unique_ptr<Nvml>(
      new NvmlLibrary(std::move(lib), f, std::move(handles), std::move(errors)));
}

}  // namespace vramd::memory
