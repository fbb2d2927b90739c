#include "memory/unattributed_alarm.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "memory/byte_size.h"

namespace vramd::memory {

UnattributedAlarm::State UnattributedAlarm::Observe(int ordinal, int64_t unattributed_bytes) {
  if (ordinal < 0 || ordinal >= kMaxDevices) return {};
  const bool over = threshold_bytes_ > 0 && std::llabs(unattributed_bytes) > threshold_bytes_;
  MutexLock lock(mu_);
  State& s = devices_[ordinal];
  if (over && !s.on) {
    ++s.raised;
    if (unattributed_bytes > 0) {
      spdlog::warn("unattributed memory alarm on cuda:{}: {} of this process's device memory has "
                   "no owner (threshold {}): an allocation bypassed the allocator, or a library "
                   "grew outside a measured stretch; GET /v2/memory shows the figures",
                   ordinal, FormatBytes(unattributed_bytes), FormatBytes(threshold_bytes_));
    } else {
      spdlog::warn("unattributed memory alarm on cuda:{}: owners are charged {} more than this "
                   "process uses on the device (threshold {}): memory charged twice, or a charge "
                   "that outlived what it stood for; GET /v2/memory shows the figures",
                   ordinal, FormatBytes(-unattributed_bytes), FormatBytes(threshold_bytes_));
    }
  } else if (!over && s.on) {
    spdlog::info("unattributed memory alarm on cuda:{} cleared: {}{} unattributed", ordinal,
                 unattributed_bytes < 0 ? "-" : "", FormatBytes(std::llabs(unattributed_bytes)));
  }
  s.on = over;
  return s;
}

UnattributedAlarm::State UnattributedAlarm::Current(int ordinal) const {
  if (ordinal < 0 || ordinal >= kMaxDevices) return {};
  MutexLock lock(mu_);
  return devices_[ordinal];
}

}  // namespace vramd::memory
