#include "memory/quota.h"

#include <fmt/format.h>

#include "memory/byte_size.h"

namespace vramd::memory {
namespace {

std::string_view TrimEntry(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<MemoryQuota> ParseMemoryQuota(std::string_view text) {
  MemoryQuota quota;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = TrimEntry(rest.substr(0, comma));
    if (item.empty()) {
      return Status::InvalidArgument(fmt::format(
          "memory quota '{}' has an empty entry: give 'SIZE' for each GPU or "
          "'DEVICE=SIZE,...' (cuda:0=2GiB,cpu=1GiB)",
          text));
    }
    QuotaLimit limit;
    std::string_view size_text = item;
    if (const size_t eq = item.find('='); eq != std::string_view::npos) {
      auto device = Device::Parse(TrimEntry(item.substr(0, eq)));
      if (!device.ok()) {
        return Status::InvalidArgument(fmt::format("memory quota '{}': {}", text,
                                                   device.status().message()));
      }
      limit.device = *device;
      size_text = item.substr(eq + 1);
    } else {
      limit.device = Device{DeviceType::kCuda, kEveryGpu};
    }
    auto bytes = ParseByteSize(size_text);
    if (!bytes.ok()) {
      return Status::InvalidArgument(
          fmt::format("memory quota '{}': {}", text, bytes.status().message()));
    }
    limit.bytes = *bytes;
    for (const QuotaLimit& earlier : quota) {
      if (earlier.device == limit.device) {
        return Status::InvalidArgument(fmt::format(
            "memory quota '{}' names {} twice", text,
            limit.device.index == kEveryGpu ? "every GPU" : limit.device.ToString()));
      }
    }
    quota.push_back(limit);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return quota;
}

int64_t QuotaLimitFor(const MemoryQuota& quota, Device device) {
  int64_t every_gpu = 0;
  for (const QuotaLimit& limit : quota) {
    if (limit.device == device) return limit.bytes;
    if (device.is_cuda() && limit.device.is_cuda() && limit.device.index == kEveryGpu) {
      every_gpu = limit.bytes;
    }
  }
  return every_gpu;
}

std::string QuotaDeviceName(Device device) {
  return device.is_cuda() && device.index == kEveryGpu ? std::string("cuda:*") : device.ToString();
}

std::string FormatMemoryQuota(const MemoryQuota& quota) {
  std::string text;
  for (const QuotaLimit& limit : quota) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{}={}", QuotaDeviceName(limit.device),
                        FormatBytes(static_cast<size_t>(limit.bytes)));
  }
  return text;
}

}  // namespace vramd::memory
