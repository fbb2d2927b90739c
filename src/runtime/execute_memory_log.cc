#include "runtime/execute_memory_log.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace vramd::runtime {
namespace {

// "812.0 MiB": one decimal, in the unit that suits the larger of the two figures, so that a
// before -> after pair reads in one unit.
std::string Pair(int64_t before, int64_t after) {
  const double largest = static_cast<double>(std::max(std::llabs(before), std::llabs(after)));
  const char* unit = "B";
  double scale = 1;
  if (largest >= 1024.0 * 1024 * 1024) {
    unit = "GiB";
    scale = 1024.0 * 1024 * 1024;
  } else if (largest >= 1024.0 * 1024) {
    unit = "MiB";
    scale = 1024.0 * 1024;
  } else if (largest >= 1024.0) {
    unit = "KiB";
    scale = 1024.0;
  }
  return fmt::format("{:.1f} -> {:.1f} {}", before / scale, after / scale, unit);
}

bool IsOn(const std::string& v) { return v == "1" || v == "true" || v == "on" || v == "yes"; }
bool IsOff(const std::string& v) { return v.empty() || v == "0" || v == "false" || v == "off" || v == "no"; }

}  // namespace

Result<std::optional<ExecuteMemoryLog>> ExecuteMemoryLog::From(const config::ModelConfig& config,
                                                               const MemoryContext& memory,
                                                               std::string where) {
  auto it = config.parameters().find(kExecuteMemoryLogParameter);
  if (it == config.parameters().end()) return std::optional<ExecuteMemoryLog>();
  const std::string& value = it->second.string_value();
  if (IsOff(value)) return std::optional<ExecuteMemoryLog>();
  if (!IsOn(value)) {
    return Status::InvalidArgument(fmt::format(
        "parameters {}: '{}' is neither on (1, true, on, yes) nor off (0, false, off, no)",
        kExecuteMemoryLogParameter, value));
  }
  return std::optional<ExecuteMemoryLog>(ExecuteMemoryLog(memory, std::move(where)));
}

ExecuteMemoryLog::Figures ExecuteMemoryLog::Take(memory::OwnerId instance) const {
  Figures f;
  f.at = std::chrono::steady_clock::now();
  if (memory_.nvml != nullptr) {
    uint64_t total = 0;
    bool any = false;
    const auto pid = static_cast<uint32_t>(getpid());
    for (int d = 0; d < memory_.nvml->DeviceCount(); ++d) {
      auto used = memory_.nvml->ProcessUsedBytes(d, pid);
      if (used.ok()) {
        total += *used;
        any = true;
      }
    }
    if (any) f.process_bytes = total;
  }
  if (auto live = memory_.ledger->SubtreeLiveBytes(instance); live.ok()) f.instance_live = *live;
  if (auto live = memory_.ledger->SubtreeLiveBytes(memory_.ledger->root()); live.ok()) {
    f.server_live = *live;
  }
  for (const auto& pool : memory_.allocator->PoolStatistics()) {
    f.pools.push_back({pool.device.ToString(), pool.reserved_bytes, pool.allocated_bytes});
  }
  return f;
}

std::string ExecuteMemoryLog::Line(memory::OwnerId instance, size_t requests,
                                   const Figures& before, const Figures& after) const {
  const double ms =
      std::chrono::duration<double, std::milli>(after.at - before.at).count();
  std::string process = "process (NVML) unavailable";
  if (before.process_bytes && after.process_bytes) {
    process = fmt::format("process (NVML) {}", Pair(static_cast<int64_t>(*before.process_bytes),
                                                    static_cast<int64_t>(*after.process_bytes)));
  }
  const int64_t delta = after.instance_live - before.instance_live;
  std::string pools;
  for (const auto& a : after.pools) {
    size_t reserved = 0, allocated = 0;  // a pool made by this execution starts at zero
    for (const auto& b : before.pools) {
      if (b.device == a.device) {
        reserved = b.reserved;
        allocated = b.allocated;
      }
    }
    if (!pools.empty()) pools += ", ";
    pools += fmt::format("{} {} / {}", a.device,
                         Pair(static_cast<int64_t>(reserved), static_cast<int64_t>(a.reserved)),
                         Pair(static_cast<int64_t>(allocated), static_cast<int64_t>(a.allocated)));
  }
  return fmt::format(
      "execute memory: {} {}, {} request(s), {:.3f} ms: {}; ledger instance {} ({:+}), all "
      "owners {}; pools (reserved / allocated) {}",
      where_, memory_.ledger->OwnerPath(instance), requests, ms, process,
      Pair(before.instance_live, after.instance_live), delta,
      Pair(before.server_live, after.server_live), pools.empty() ? "none" : pools);
}

void ExecuteMemoryLog::Log(memory::OwnerId instance, size_t requests, const Figures& before,
                           const Figures& after) const {
  spdlog::info("{}", Line(instance, requests, before, after));
}

}  // namespace vramd::runtime
