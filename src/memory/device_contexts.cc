#include "memory/device_contexts.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "memory/cuda_devices.h"
#include "memory/nvml.h"

namespace vramd::memory {

DeviceContexts::Hooks DeviceContexts::ForThisProcess(const Nvml* nvml,
                                                     std::string nvml_unavailable_reason) {
  Hooks hooks;
  hooks.device_count = [] { return CudaDeviceCount(); };
  hooks.make_context = [](int ordinal) { return CudaInitContext(ordinal); };
  if (nvml != nullptr) {
    const uint32_t pid = static_cast<uint32_t>(getpid());
    hooks.process_used = [nvml, pid](int ordinal) { return nvml->ProcessUsedBytes(ordinal, pid); };
  }
  hooks.no_figure_reason = std::move(nvml_unavailable_reason);
  return hooks;
}

bool DeviceContexts::OpenedLocked(int ordinal) const {
  return std::any_of(opened_.begin(), opened_.end(),
                     [ordinal](const ContextBaseline& b) { return b.ordinal == ordinal; });
}

Status DeviceContexts::Open(int ordinal) {
  MutexLock lock(mu_);
  if (OpenedLocked(ordinal)) return Status::Ok();
  // Under the lock, so no other Open's allocations land between the context and its figure.
  VRAMD_RETURN_IF_ERROR(hooks_.make_context(ordinal));
  ContextBaseline b;
  b.ordinal = ordinal;
  if (!hooks_.process_used) {
    b.reason = hooks_.no_figure_reason.empty() ? "NVML unavailable" : hooks_.no_figure_reason;
  } else if (Result<uint64_t> used = hooks_.process_used(ordinal); !used.ok()) {
    b.reason = used.status().message();
  } else {
    b.bytes = static_cast<int64_t>(*used);
  }
  spdlog::info("cuda:{}: CUDA context made on first use; {}", ordinal,
               b.bytes ? fmt::format("it and the runtime take {:.1f} MiB (NVML)",
                                     static_cast<double>(*b.bytes) / (1 << 20))
                       : "its memory is not measured: " + b.reason);
  opened_.push_back(std::move(b));
  return Status::Ok();
}

bool DeviceContexts::IsOpen(int ordinal) const {
  MutexLock lock(mu_);
  return OpenedLocked(ordinal);
}

std::vector<ContextBaseline> DeviceContexts::Baselines() const {
  const int count = hooks_.device_count ? hooks_.device_count() : 0;
  MutexLock lock(mu_);
  std::vector<ContextBaseline> all = opened_;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    if (OpenedLocked(ordinal)) continue;
    all.push_back({ordinal, std::nullopt,
                   fmt::format("no CUDA context yet: nothing has used cuda:{}", ordinal)});
  }
  std::sort(all.begin(), all.end(), [](const ContextBaseline& a, const ContextBaseline& b) {
    return a.ordinal < b.ordinal;
  });
  return all;
}

}  // namespace vramd::memory
